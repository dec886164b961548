// Drives lapse's HTML report in headless Chromium (Debian's
// /usr/bin/chromium, through playwright-core) the way a person would:
// pick a thread, search, sort, expand, switch elapsed/application, zoom
// the timeline, open every view. Fails on any script or console error and
// on any request other than the page itself; saves screenshots.
//
//   node drive.js check PAGE.html OUT_DIR [--sampling] [--deep N] [--sampled-timeline] [--off-cpu-timeline] [--dominated F,G]
//   node drive.js bench PAGE.html RUNS
//
// Prints one JSON object on stdout: what it checked and measured.

"use strict";
const path = require("path");
const { chromium } = require("playwright-core");

const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function fail(msg) {
  throw new Error(msg);
}

async function open(browser, file, report) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const url = "file://" + path.resolve(file);
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") report.console.push(m.type() + ": " + m.text());
  });
  page.on("pageerror", (e) => report.errors.push(String(e)));
  page.on("request", (r) => {
    if (r.url() !== url) report.requests.push(r.url());
  });
  const t0 = Date.now();
  await page.goto(url, { waitUntil: "load", timeout: 120000 });
  await page.waitForSelector("body[data-rendered], body[data-error]", { timeout: 120000 });
  report.load_ms = Date.now() - t0;
  const err = await page.getAttribute("body", "data-error");
  if (err) fail("script error: " + err);
  report.rendered_ms = Number(await page.getAttribute("body", "data-rendered-ms"));
  return page;
}

// Rows of the panel's lists (all of them, not only those in view).
async function rows(page, panel) {
  return page.$$eval("#panel-" + panel + " .vlist", (e) => e.reduce((n, x) => n + Number(x.getAttribute("data-rows")), 0));
}

async function tab(page, name) {
  await page.click('#tabs button[data-tab="' + name + '"]');
  const shown = await page.getAttribute("body", "data-tab");
  if (shown !== name) fail("tab " + name + " not shown");
}

async function texts(page, selector) {
  return page.$$eval(selector, (e) => e.map((x) => x.textContent));
}

async function timed(page, what, report, action) {
  const t0 = Date.now();
  await action();
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
  report.timings[what] = Date.now() - t0;
}

async function check(browser, file, out, opts) {
  const report = { console: [], errors: [], requests: [], checks: [], screenshots: [], timings: {} };
  const ok = (what) => report.checks.push(what);
  const page = await open(browser, file, report);
  const shot = async (name) => {
    const p = path.join(out, name + ".png");
    await page.mouse.move(1, 1);
    await page.evaluate(() => { document.getElementById("tip").hidden = true; });
    await page.screenshot({ path: p, fullPage: false });
    report.screenshots.push(p);
  };

  // Call tree: shown first, hot path open; expand a closed row.
  let before = await rows(page, "calltree");
  if (before < 1) fail("the call tree has no rows");
  const closed = await page.$$('#panel-calltree .tree-row .twisty:text-is("\u25b8")');
  if (closed.length) {
    await timed(page, "expand", report, () => closed[0].click());
    const after = await rows(page, "calltree");
    if (!(after > before)) fail("expanding a call-tree row showed nothing (" + before + " -> " + after + ")");
    ok("expand a call-tree node: " + before + " -> " + after + " rows");
  } else {
    ok("call tree fully open already (" + before + " rows)");
  }
  if (opts.deep) {
    // Open everything below the first row: the whole recursion.
    await page.click("#panel-calltree .tree-row");
    await timed(page, "expand_all", report, () => page.keyboard.press("*"));
    const all = await rows(page, "calltree");
    const depth = await page.evaluate(() => {
      const body = document.querySelector("#panel-calltree .vlist");
      body.scrollTop = body.scrollHeight;
      return new Promise((r) => setTimeout(() => r(Math.max.apply(null,
        Array.from(document.querySelectorAll("#panel-calltree .tree-row")).map((e) => Number(e.getAttribute("data-depth"))))), 300));
    });
    if (depth < opts.deep - 1) fail("expanded call tree reaches depth " + depth + ", expected " + (opts.deep - 1));
    ok("deep: expand-all shows depth " + depth + " (" + all + " rows in view)");
  }
  await shot("calltree");

  // Elapsed / application switch (instrumentation).
  if (!opts.sampling) {
    const cells = () => texts(page, "#panel-calltree .tree-row .cell:nth-child(2)");
    const el = await cells();
    await timed(page, "switch_application", report, () => page.click('#mode button[data-mode="a"]'));
    if ((await page.getAttribute("body", "data-mode")) !== "a") fail("application mode not set");
    const app = await cells();
    ok("switch to application: first totals " + el.slice(0, 3).join(", ") + " -> " + app.slice(0, 3).join(", "));
    if (opts.offCpu && JSON.stringify(el) === JSON.stringify(app)) fail("application totals equal elapsed ones despite off-CPU time");
    await page.click('#mode button[data-mode="e"]');
  }

  // Threads: pick one, then back to all.
  const threads = await page.$$("#threads .thread-item");
  if (!threads.length) fail("no thread to pick");
  const pick = threads[threads.length > 1 ? 1 : 0];
  const label = await pick.textContent();
  await timed(page, "pick_thread", report, () => pick.click());
  const sel = await page.textContent("#selection");
  if (!/thread/.test(sel)) fail("picking a thread did not change the selection: " + sel);
  if (!(await pick.evaluate((e) => e.classList.contains("on")))) fail("picked thread not marked");
  ok("pick thread " + label.trim() + ": " + sel);
  await tab(page, "functions");
  const oneThread = await rows(page, "functions");
  await page.click("#threads .all-item");
  await tab(page, "functions");
  const allThreads = await rows(page, "functions");
  ok("functions rows, one thread vs all: " + oneThread + " / " + allThreads);

  if (opts.dominated) await checkDominated(page, opts.dominated, ok);

  // Sort: by function name, ascending.
  await timed(page, "sort", report, () => page.click('#panel-functions .vhead .cell[data-col="function"]'));
  // (a probe-dominated function's name has "~ " before it; it sorts by its name)
  const names = (await texts(page, "#panel-functions .table-row .cell:first-child")).map((n) => n.replace(/^~ /, ""));
  const sorted = names.slice().sort((a, b) => a.localeCompare(b));
  if (JSON.stringify(names) !== JSON.stringify(sorted)) fail("functions not sorted by name: " + names.slice(0, 5));
  ok("sort by function name: " + names.slice(0, 3).join(", "));
  await page.click('#panel-functions .vhead .cell[data-col="function"]');

  // Search: the first function's name narrows the table to its matches.
  const query = opts.query || names[0];
  await timed(page, "search", report, async () => {
    await page.fill("#search", query);
    await page.waitForTimeout(400);
  });
  const found = await texts(page, "#panel-functions .table-row .cell:first-child");
  if (!found.length) fail("search " + query + " found nothing");
  if (found.length > allThreads) fail("search did not narrow the table");
  ok("search " + JSON.stringify(query) + ": " + found.length + " of " + allThreads + " rows");

  // Select the first match: the sandwich view shows its callers and callees.
  await page.click("#panel-functions .table-row");
  const selected = await page.getAttribute("body", "data-selected");
  await tab(page, "sandwich");
  const sandwich = await rows(page, "sandwich");
  if (sandwich < 2) fail("sandwich of " + selected + " shows " + sandwich + " rows");
  ok("sandwich of " + selected + ": " + sandwich + " rows");
  await shot("sandwich");
  await page.fill("#search", "");
  await page.waitForTimeout(400);

  // Bottom-up: expand the heaviest function's callers.
  await tab(page, "bottomup");
  before = await rows(page, "bottomup");
  const bu = await page.$('#panel-bottomup .tree-row .twisty:text-is("\u25b8")');
  if (bu) {
    await bu.click();
    const after = await rows(page, "bottomup");
    if (!(after > before)) fail("bottom-up: expanding showed no callers");
    ok("bottom-up: " + before + " -> " + after + " rows");
  }

  // Flame graph: drawn; click a frame to zoom.
  await timed(page, "flame", report, () => tab(page, "flame"));
  const painted = await page.evaluate(() => {
    const c = document.querySelector(".flame-canvas"), d = c.getContext("2d").getImageData(0, 0, c.width, Math.min(c.height, 60)).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
    return n;
  });
  if (!painted) fail("flame graph is empty");
  const box = await page.$(".flame-canvas");
  const bb = await box.boundingBox();
  await page.mouse.click(bb.x + 30, bb.y + 18 + 9);
  const zoomed = await page.getAttribute("#panel-flame", "data-zoom");
  if (!zoomed || zoomed === "0") fail("clicking a flame-graph frame did not zoom to it");
  ok("flame graph painted " + painted + " pixels; clicked a frame, zoomed to node " + zoomed);
  await shot("flame");

  // Timeline: zoom in with the button and the wheel.
  await timed(page, "timeline", report, () => tab(page, "timeline"));
  const span = async () => {
    const v = (await page.getAttribute("#panel-timeline", "data-view")).split(":").map(Number);
    return v[1] - v[0];
  };
  const s0 = await span();
  await timed(page, "zoom", report, () => page.click("#timeline-zoom-in"));
  const s1 = await span();
  const tl = await (await page.$(".timeline-canvas")).boundingBox();
  await page.mouse.move(tl.x + tl.width / 3, tl.y + 60);
  await page.mouse.wheel(0, -300);
  await page.waitForTimeout(100);
  const s2 = await span();
  if (!(s1 < s0 && s2 < s1)) fail("timeline did not zoom: " + [s0, s1, s2]);
  ok("timeline zoom: " + [s0, s1, s2].map((x) => Math.round(x)).join(" -> ") + " ns");
  await shot("timeline-zoomed");
  await page.click("#timeline-zoom-reset");
  await shot("timeline");
  if (opts.sampledTimeline) await sampledTimeline(page, ok);
  if (opts.offCpuTimeline) await offCpuTimeline(page, ok, shot);

  // Lines, then the functions table as a person first sees it.
  await tab(page, "lines");
  ok("lines: " + (await rows(page, "lines")) + " rows");
  await tab(page, "functions");
  await shot("functions");
  await wholeNumbers(page, "functions", ok);
  await tab(page, "calltree");
  await wholeNumbers(page, "calltree", ok);

  const err = await page.getAttribute("body", "data-error");
  if (err) fail("script error: " + err);
  await page.close();
  return report;
}

// A sampling page's timeline (html_recording::sampled_deep): the thread's
// samples drawn where it ran (3/4 of the time, then idle, then again),
// its CPU usage above them, the 20 interpreter frames every bucket shares
// collapsed into the lane's title, and no off-CPU legend without off-CPU data.
async function sampledTimeline(page, ok) {
  if (!(await page.$("#panel-timeline .legend-cpu"))) fail("no CPU usage legend on a sampling timeline");
  if (await page.$("#panel-timeline .legend-off")) fail("an off-CPU legend without off-CPU data");
  const lanes = await page.getAttribute("#panel-timeline", "data-lanes");
  if (lanes !== "20+2") fail("lane rows (common frames + rows shown): " + lanes + ", not 20+2");
  const layout = (await page.getAttribute("#panel-timeline", "data-lane-y")).split(" ").map(Number);
  const seen = await page.evaluate(([cpuY, rowsY, cpuH, rowH]) => {
    const c = document.querySelector(".timeline-canvas"), ctx = c.getContext("2d"), k = c.width / c.clientWidth;
    // (one readback: several make Chromium warn)
    const all = ctx.getImageData(0, 0, c.width, c.height).data;
    const line = (y) => all.subarray(Math.round(y * k) * c.width * 4, (Math.round(y * k) + 1) * c.width * 4);
    const count = (d, pred) => {
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (pred(d[i], d[i + 1], d[i + 2])) n++;
      return n / (d.length / 4);
    };
    const background = (r, g, b) => (r === 244 && g === 244 && b === 244) || (r === 255 && g === 255 && b === 255);
    return {
      frames: count(line(rowsY + 2), (r, g, b) => !background(r, g, b)),
      cpu: count(line(cpuY + cpuH - 4), (r, g, b) => g > r + 40 && g > b + 40),
      y: rowsY + rowH / 2
    };
  }, layout);
  // (1/8 of the run idle, and the lane's start and end at the view's edges)
  if (!(seen.frames > 0.75 && seen.frames < 0.95)) fail("sampled frames cover " + seen.frames.toFixed(3) + " of the timeline's width, not 0.75-0.95");
  if (!(seen.cpu > 0.75 && seen.cpu < 0.95)) fail("the CPU usage graph covers " + seen.cpu.toFixed(3) + " of the width, not 0.75-0.95");
  ok("sampled timeline: frames over " + seen.frames.toFixed(3) + " of the width, CPU usage over " + seen.cpu.toFixed(3) + ", lanes " + lanes);
  const tl = await (await page.$(".timeline-canvas")).boundingBox();
  await page.mouse.move(tl.x + tl.width * 0.3, tl.y + seen.y);
  const tip = await page.textContent("#tip");
  if (!/CPU 100\.0%/.test(tip) || !/(parse|eval)/.test(tip) || !/23 deep|22 deep|21 deep/.test(tip)) fail("timeline tip: " + tip);
  ok("timeline tip: " + tip.split("\n").slice(0, 3).join(" | "));
}

// A sampling page recorded with --off-cpu (html_recording::sampled_off_cpu,
// 401 ms): the off-CPU strip tells, where the thread waited, the stack it
// waited in, blocked (eval > read_socket, 299-329 ms) or preempted (parse,
// 329-349 ms), and how long; clicking there selects that stack's innermost
// function as clicking a sampled frame does.
async function offCpuTimeline(page, ok, shot) {
  if (!(await page.$("#panel-timeline .legend-off"))) fail("no off-CPU legend with off-CPU data");
  const offY = Number(await page.getAttribute("#panel-timeline", "data-off-y"));
  if (!offY) fail("no off-CPU strip in the first lane");
  const tl = await (await page.$(".timeline-canvas")).boundingBox();
  const at = (ms) => tl.x + tl.width * ms / 401;
  const tipAt = async (ms) => {
    await page.mouse.move(at(ms), tl.y + offY);
    return page.textContent("#tip");
  };
  let tip = await tipAt(310);
  if (!/blocked/.test(tip) || /preempted/.test(tip) || !/for 30\.0 ms in:\s*read_socket\s*eval/.test(tip)) fail("off-CPU tip while blocked: " + tip);
  ok("off-CPU tip (blocked): " + tip.replace(/\s+/g, " ").slice(0, 160));
  await shot("timeline-off-cpu");
  await page.mouse.click(at(310), tl.y + offY);
  let selected = await page.getAttribute("body", "data-selected");
  if (selected !== "read_socket") fail("clicking the off-CPU strip selected " + selected + ", not read_socket");
  tip = await tipAt(340);
  if (!/preempted/.test(tip) || !/for 20\.0 ms in:\s*parse\s*luaV_execute_19/.test(tip)) fail("off-CPU tip while preempted: " + tip);
  ok("off-CPU tip (preempted): " + tip.replace(/\s+/g, " ").slice(0, 160));
  await page.mouse.click(at(340), tl.y + offY);
  selected = await page.getAttribute("body", "data-selected");
  if (selected !== "parse") fail("clicking the preempted period selected " + selected + ", not parse");
  // (where the thread ran, the strip has nothing to say: the lane's tip)
  tip = await tipAt(100);
  if (/blocked|preempted/.test(tip)) fail("an off-CPU tip where the thread ran: " + tip);
  ok("off-CPU strip: clicking selected read_socket, then parse");
}

// No number in the panel's rows is cut (`100....`, `1,190,…`): every
// value cell shows its whole text.
async function wholeNumbers(page, panel, ok) {
  const cells = await page.$$eval("#panel-" + panel + " .vrow .cell:not(.text)", (cs) =>
    cs.map((c) => [c.textContent, c.scrollWidth > c.clientWidth]));
  const cut = cells.filter((c) => c[1]).map((c) => c[0]);
  if (cut.length) fail(panel + ": numbers cut: " + cut.slice(0, 5).join(", "));
  const longest = cells.map((c) => c[0]).reduce((a, b) => (b.length > a.length ? b : a), "");
  ok(panel + ": " + cells.length + " numbers whole (longest " + JSON.stringify(longest) + ")");
}

// Probe-dominated functions (all threads shown, functions tab open): the
// functions table marks exactly `want` with "~ " and a tooltip, a legend
// says what the mark means, and the call tree marks the same functions.
async function checkDominated(page, want, ok) {
  const cells = await page.$$eval("#panel-functions .table-row .cell:first-child",
    (e) => e.map((x) => [x.textContent, x.title]));
  const marked = cells.filter((c) => c[0].startsWith("~ ")).map((c) => c[0].slice(2)).sort();
  if (JSON.stringify(marked) !== JSON.stringify(want.slice().sort())) fail("functions marked ~: " + marked + ", expected " + want);
  if (cells.some((c) => c[0].startsWith("~ ") !== /probe-dominated/.test(c[1]))) fail("a ~ mark without its tooltip, or a tooltip without the mark");
  const legend = await texts(page, "#panel-functions .legend");
  if (!legend.length || !/probe-dominated/.test(legend[0])) fail("no legend under the functions table");
  await tab(page, "calltree");
  const tree = await page.$$eval("#panel-calltree .tree-row .name", (e) => e.map((x) => [!!x.querySelector(".pd"), x.querySelector(".fname").textContent]));
  const treeMarked = Array.from(new Set(tree.filter((r) => r[0]).map((r) => r[1]))).sort();
  const shown = new Set(tree.map((r) => r[1]));
  const expected = want.filter((w) => shown.has(w)).sort();
  if (JSON.stringify(treeMarked) !== JSON.stringify(expected)) fail("call tree marks " + treeMarked + ", expected " + expected);
  if (!(await texts(page, "#panel-calltree .legend")).length) fail("no legend under the call tree");
  await tab(page, "functions");
  ok("probe-dominated: " + marked.join(", ") + " marked ~ in the functions table and the call tree (" + treeMarked.join(", ") + ")");
}

// The time the page itself spent on an action (its data-last-ms mark).
async function pageTime(page, what, report, action) {
  await action();
  await page.waitForFunction((w) => document.body.getAttribute("data-last") === w, what);
  report.timings[what] = Number(await page.getAttribute("body", "data-last-ms"));
}

async function bench(browser, file, runs) {
  const out = { runs: [] };
  for (let i = 0; i < runs; i++) {
    const report = { console: [], errors: [], requests: [], timings: {} };
    const page = await open(browser, file, report);
    for (const t of ["functions", "bottomup", "flame", "timeline", "lines"]) await pageTime(page, t, report, () => tab(page, t));
    await tab(page, "timeline");
    await pageTime(page, "zoom", report, () => page.click("#timeline-zoom-in"));
    const threads = await page.$$("#threads .thread-item");
    if (threads.length) await pageTime(page, "choose", report, () => threads[0].click());
    await pageTime(page, "search", report, () => page.fill("#search", "fn_1"));
    if (!(await page.$("#mode[hidden]"))) await pageTime(page, "mode", report, () => page.click('#mode button[data-mode="a"]'));
    out.runs.push({ rendered_ms: report.rendered_ms, load_ms: report.load_ms, timings: report.timings, errors: report.errors.concat(report.console) });
    await page.close();
  }
  return out;
}

(async () => {
  const [cmd, file, arg, ...rest] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ARGS });
  let result;
  try {
    if (cmd === "bench") result = await bench(browser, file, Number(arg || 3));
    else {
      const deep = rest.indexOf("--deep");
      result = await check(browser, file, arg, {
        sampling: rest.includes("--sampling"),
        offCpu: rest.includes("--off-cpu"),
        sampledTimeline: rest.includes("--sampled-timeline"),
        offCpuTimeline: rest.includes("--off-cpu-timeline"),
        deep: deep >= 0 ? Number(rest[deep + 1]) : 0,
        query: rest.includes("--query") ? rest[rest.indexOf("--query") + 1] : null,
        dominated: rest.includes("--dominated") ? rest[rest.indexOf("--dominated") + 1].split(",") : null
      });
    }
  } catch (e) {
    result = { failed: String(e && e.stack || e) };
  }
  await browser.close();
  process.stdout.write(JSON.stringify(result, null, 1) + "\n");
  process.exit(result.failed ? 1 : 0);
})();
