/* The Chinese edition's search: what the reader types, read as the index holds it.
 *
 * Loaded before Sphinx's searchtools.js on the Chinese search page only (book/_ext/zh_search.py),
 * which keeps a splitQuery already defined. Sphinx's own splits the query at spaces and
 * punctuation, so "首 token 延迟" becomes 首 (never indexed: one character), token and 延迟,
 * and "KV缓存" stays one word that no page holds (the index has KV and 缓存). Here:
 *
 * - words that together make one term of the index are joined, spaces or not
 *   ("首 token 延迟" and "首token延迟" -> 首token延迟; "KV 缓存" and "KV缓存" -> kv缓存);
 * - a run of Chinese the index does not hold is cut into the longest words it does
 *   (多头潜在注意力机制 -> 多头潜在注意力, 机制), and a character the index cannot hold is
 *   dropped rather than left to make every page fail the query;
 * - a page that defines a term (heading, bold, emphasis: _static/zh_search_defined.js)
 *   ranks above pages that only mention it.
 *
 * Offline: no network, no library but Sphinx's own.
 */
"use strict";

var zhSearchTerms = [];  // the query's words, as the index holds them (for the ranking)

const zhIndexHas = (word) => {
  const index = Search._index;
  const stemmed = new Stemmer().stemWord(word.toLowerCase());
  return [index.terms, index.titleterms].some(
    (map) => Object.prototype.hasOwnProperty.call(map, stemmed) ||
             Object.prototype.hasOwnProperty.call(map, word.toLowerCase()));
};

const zhIsChinese = (text) => /[\u3400-\u9fff]/.test(text);

// A run the index does not hold, cut into the longest words it does, left to right.
const zhSegment = (run) => {
  const out = [];
  let start = 0;
  while (start < run.length) {
    let end = run.length;
    while (end > start + 1 && !zhIndexHas(run.slice(start, end))) end -= 1;
    const word = run.slice(start, end);
    if (end > start + 1 || zhIndexHas(word)) out.push(word);
    start = end;
  }
  return out;
};

// A word the index does not hold: its Latin and Chinese parts, each read again.
const zhResolve = (word) => {
  if (zhIndexHas(word) || !zhIsChinese(word)) return [word];
  const parts = word.match(/[\u3400-\u9fff]+|[^\u3400-\u9fff]+/g);
  if (parts.length > 1) return parts.flatMap(zhResolve);
  return zhSegment(word);
};

var splitQuery = (query) => {
  const pieces = query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu).filter((p) => p);
  if (typeof Search === "undefined" || !Search.hasIndex()) return pieces;
  const out = [];
  for (let i = 0; i < pieces.length;) {
    // The longest run of pieces that is one word of the index, joined without spaces.
    let j = pieces.length;
    while (j > i + 1 && !zhIndexHas(pieces.slice(i, j).join(""))) j -= 1;
    const joined = pieces.slice(i, j).join("");
    out.push(...(j > i + 1 ? [joined] : zhResolve(joined)));
    i = j;
  }
  zhSearchTerms = out.map((w) => w.toLowerCase());
  return out;
};

// Sphinx calls Scorer.score(result) on each result, if defined; result[0] is the page.
const zhDefinesQuery = (docname) => typeof ZH_SEARCH_DEFINED !== "undefined" &&
  zhSearchTerms.some((term) => (ZH_SEARCH_DEFINED[term] || []).includes(docname));

document.addEventListener("DOMContentLoaded", () => {
  if (typeof Scorer === "undefined") return;
  const DEFINES = 30;  // above a heading's 15: a defining page leads the results
  Scorer.score = (result) => result[4] + (zhDefinesQuery(result[0]) ? DEFINES : 0);
});
