// Reviews a change set in the writ dashboard in headless Chromium: the Review tab lists the open
// change set, its file's three hunks side by side, each with a checkbox; the reviewer unticks
// the last, writes a comment and applies the other two, and the page then shows the change set
// partially applied, with the third hunk still open.
// Usage: node review.mjs <writ base url> <screenshot path>
import { chromium } from "playwright-core";

const [base, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = null;
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
try {
  page.on("pageerror", (e) => { failed = failed || `page error: ${e.message}`; });
  await page.goto(base + "/", { waitUntil: "load" });
  await page.click("#tab-review");
  await page.waitForSelector(".change-item", { timeout: 10000 });
  const listed = await page.textContent("#changes");
  if (!listed.includes("app.py")) throw new Error(`the list shows ${listed}`);
  await page.click(".change-item");
  await page.waitForSelector("input.take", { timeout: 10000 });
  const boxes = page.locator("input.take");
  if ((await boxes.count()) !== 3) throw new Error(`${await boxes.count()} hunks shown, not 3`);
  // Side by side: the base's line on the left, the proposal's on the right.
  const rows = await page.$$eval("table.sbs tr", (trs) => trs.map((tr) => tr.textContent));
  if (!rows.some((r) => r.includes("v3 = 3") && r.includes("v3 = 300"))) throw new Error(`no side-by-side row for v3: ${JSON.stringify(rows.slice(0, 8))}`);
  await boxes.nth(2).uncheck();
  await page.fill("#comment", "the third is not wanted");
  await page.click("#apply");
  await page.waitForFunction(() => /partially_applied/.test(document.querySelector("#change-state")?.textContent || ""), null, { timeout: 10000 });
  const states = await page.$$eval(".hunk header", (hs) => hs.map((h) => h.textContent));
  if (!(/applied/.test(states[0]) && /applied/.test(states[1]) && /open/.test(states[2]))) throw new Error(`hunk states ${JSON.stringify(states)}`);
} catch (e) {
  failed = failed || String(e && e.message || e);
}
if (shot) await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
await browser.close();
if (failed) { console.error("dashboard review test failed: " + failed); process.exit(1); }
console.log("dashboard review test passed");
