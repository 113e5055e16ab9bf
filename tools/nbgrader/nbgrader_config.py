# nbgrader's configuration for a course graded by this book's grader (docs/instructors.md,
# "Grading under nbgrader"). Copy it into the course folder (beside source/ and submitted/).
#
# Besides the course id and a timeout that covers a chapter, it makes a kernel that
# cannot run the grader an error nbgrader reports. Without it, an autograder cell that
# raises (`No module named 'grading'`: the kernel nbgrader starts is not the book's .venv)
# is just a failed grade cell: `nbgrader autograde` exits 0 and every student gets 0.
# With it, such a notebook is not graded, its student is listed among nbgrader's errors,
# and `nbgrader autograde` exits 1. An autograder cell never raises for a student's
# mistake (a wrong, crashing or unsolved notebook shows its points), so any error in one
# is the grader's or the kernel's.
c = get_config()  # noqa: F821 - nbgrader defines it when it loads this file
c.CourseDirectory.course_id = "long-context"
# The first autograder cell of a notebook grades the whole chapter (about as long as
# `make grade` takes for one chapter, 20 s to a few minutes); nbgrader's default is 30 s.
c.Execute.timeout = 900

from nbgrader.converters.autograde import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute, NbGraderPreprocessor  # noqa: E402

AUTOGRADER_SUFFIX = "-autograder"  # grade ids of the book's autograder cells (grading/nbgrader.py)
KERNEL_STEP = ("install the book's .venv as nbgrader's python3 kernel: "
               "/path/to/repo/.venv/bin/python -m ipykernel install --prefix <nbgrader's venv> --name python3")


class RequireTheGrader(NbGraderPreprocessor):
    """After the notebook ran: stop if an autograder cell of the book raised."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            grade_id = str(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
            if cell.cell_type != "code" or not grade_id.endswith(AUTOGRADER_SUFFIX):
                continue
            for out in cell.get("outputs", []):
                if out.get("output_type") != "error":
                    continue
                why = f"{out.get('ename')}: {out.get('evalue')}"
                hint = KERNEL_STEP if out.get("ename") in ("ModuleNotFoundError", "ImportError") else \
                    "the book's grader failed; see the cell's output in the autograded notebook"
                raise RuntimeError(f"the autograder cell {grade_id} raised {why}: the notebook was not graded "
                                   f"(a grade of 0 would be wrong); {hint}")
        return nb, resources


_steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
c.Autograde.autograde_preprocessors = _steps[:_steps.index(Execute) + 1] + [RequireTheGrader] + \
    _steps[_steps.index(Execute) + 1:]
