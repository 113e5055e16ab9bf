// The link to this page in the other edition (book/_ext/editions.py) keeps the reader's
// section: both editions give a section the id of its English heading.
document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a.edition-link");
  if (link && window.location.hash) {
    link.href = link.href.split("#")[0] + window.location.hash;
  }
});
