// The search page: sends the chosen image to POST /v1/search and shows the matches. No framework, no build
// step, nothing fetched from another host: the page works offline, against the server that serves it.
"use strict";

const form = document.getElementById("query-form");
const drop = document.getElementById("drop");
const fileInput = document.getElementById("file");
const statusLine = document.getElementById("status");
const results = document.getElementById("results");

function text(tag, content, className) {
  const node = document.createElement(tag);
  node.textContent = content;
  if (className) node.className = className;
  return node;
}

async function describeServer() {
  const info = document.getElementById("info");
  try {
    const response = await fetch("/v1/info");
    const body = await response.json();
    const threshold = body.threshold === null ? "no calibrated threshold" : `threshold ${body.threshold.toFixed(4)}`;
    info.textContent = `${body.items} gallery items · ${body.codec} index · ${body.embedding_size}-d · ${threshold}`;
  } catch (error) {
    info.textContent = `The server did not describe itself: ${error}`;
  }
}

function showResults(body, elapsed) {
  results.replaceChildren();
  const result = body.results[0];
  const embed = body.timing_ms.embed === undefined ? "" : `embedding ${body.timing_ms.embed.toFixed(1)} ms, `;
  statusLine.className = "";
  statusLine.textContent = `${result.matches.length} matches (${embed}${elapsed.toFixed(0)} ms in all)`;
  result.matches.forEach((match, rank) => {
    const verdict = match.accepted === null ? "no threshold" : match.accepted ? "accepted" : "rejected";
    const item = document.createElement("li");
    item.className = match.accepted === null ? "" : verdict;
    item.dataset.id = match.id;
    const image = document.createElement("img");
    image.src = `/v1/items/${match.id}/image`;
    image.alt = `gallery item ${match.id}`;
    item.append(image, text("div", `#${rank + 1}  similarity ${match.similarity.toFixed(4)}`, "similarity"),
                text("div", verdict, "verdict"), text("div", match.stored_path, "path"));
    item.title = match.path;
    results.append(item);
  });
}

async function search(file) {
  if (!file) return;
  document.getElementById("query").hidden = false;
  document.getElementById("query-image").src = URL.createObjectURL(file);
  statusLine.className = "";
  statusLine.textContent = "Searching…";
  const data = new FormData();
  data.append("images", file, file.name);
  data.append("k", document.getElementById("k").value || "8");
  const threshold = document.getElementById("threshold").value;
  if (threshold !== "") data.append("threshold", threshold);
  const rerank = document.getElementById("rerank").value.trim();
  if (rerank !== "") data.append("rerank", rerank);
  const started = performance.now();
  try {
    const response = await fetch("/v1/search", { method: "POST", body: data });
    const body = await response.json();
    if (!response.ok) {
      results.replaceChildren();
      statusLine.className = "error";
      statusLine.textContent = body.fix ? `${body.error} (${body.fix})` : body.error;
      return;
    }
    showResults(body, performance.now() - started);
  } catch (error) {
    statusLine.className = "error";
    statusLine.textContent = `The request failed: ${error}`;
  }
}

fileInput.addEventListener("change", () => search(fileInput.files[0]));
form.addEventListener("submit", (event) => { event.preventDefault(); search(fileInput.files[0]); });
["dragenter", "dragover"].forEach((name) => drop.addEventListener(name, (event) => {
  event.preventDefault();
  drop.classList.add("over");
}));
["dragleave", "drop"].forEach((name) => drop.addEventListener(name, () => drop.classList.remove("over")));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  if (event.dataTransfer.files.length) search(event.dataTransfer.files[0]);
});
describeServer();
