// The page's few DOM helpers: a query, SVG elements, HTML escaping, and writes that
// touch the document only when the text changes.

export const $ = (sel, root = document) => root.querySelector(sel);
const SVGNS = 'http://www.w3.org/2000/svg';

export function esc(value) {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  }[c]));
}

export function el(tag, attrs, parent, text) {
  const node = document.createElementNS(SVGNS, tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text != null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

export function setText(node, text) {
  if (node && node.textContent !== text) node.textContent = text;
}

export function setHTML(node, html) {
  if (node && node.__html !== html) {
    node.innerHTML = html;
    node.__html = html;
  }
}
