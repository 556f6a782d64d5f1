// Opens the writ dashboard in headless Chromium with a key bound to the workspaces `a` and `b`:
// the picker lists those two only; a batch started with `a` picked is written there and listed
// under `a`; picking `b` lists b's batch and audit records and nothing of a's.
// Usage: node workspaces.mjs <writ base url> <screenshot path> <api key> <file already in b>
import { chromium } from "playwright-core";

const [base, shot, key, inB] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = null;
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
const jobsText = () => page.textContent("#jobs");
try {
  page.on("pageerror", (e) => { failed = failed || `page error: ${e.message}`; });
  await page.goto(base + "/", { waitUntil: "load" });
  await page.fill("#key", key);
  await page.dispatchEvent("#key", "change");
  // The picker: the key's workspaces and no other (not `default`, so not "all" either).
  await page.waitForFunction(() => document.querySelectorAll("#workspace option").length > 1, null, { timeout: 10000 });
  const options = await page.$$eval("#workspace option", (os) => os.map((o) => o.value));
  if (JSON.stringify(options) !== JSON.stringify(["a", "b"])) throw new Error(`picker lists ${JSON.stringify(options)}`);

  // In `a`: a batch started from the form, listed there.
  await page.selectOption("#workspace", "a");
  await page.locator("#rows .row").nth(0).locator(".path").fill("from_page.py");
  await page.locator("#rows .row").nth(0).locator(".desc").fill("a constant");
  await page.click("#start");
  await page.waitForFunction(() => document.querySelectorAll("#files .file .result.ok").length === 1, null, { timeout: 30000 });
  await page.waitForFunction(() => !/following/.test(document.querySelector("#jobstate")?.textContent || ""), null, { timeout: 15000 });
  await page.waitForFunction(() => /from_page\.py/.test(document.querySelector("#jobs")?.textContent || ""), null, { timeout: 10000 });
  if ((await jobsText()).includes(inB)) throw new Error(`a's list shows b's batch: ${await jobsText()}`);

  // In `b`: b's batch only, in the batches and in the audit log.
  await page.selectOption("#workspace", "b");
  await page.waitForFunction((f) => (document.querySelector("#jobs")?.textContent || "").includes(f), inB, { timeout: 10000 });
  if ((await jobsText()).includes("from_page.py")) throw new Error(`b's list shows a's batch: ${await jobsText()}`);
  await page.click("#tab-audit");
  await page.waitForSelector("#ops tr", { timeout: 10000 });
  const files = await page.$$eval("#ops tr td:nth-child(2)", (tds) => tds.map((t) => t.textContent));
  if (files.length !== 1 || !files[0].includes(inB)) throw new Error(`b's audit log shows ${JSON.stringify(files)}`);
  // An operation of b opens (its route is b's).
  await page.locator("#ops tr").first().click();
  await page.waitForSelector("#preview", { timeout: 10000 });
} catch (e) {
  failed = failed || String(e && e.message || e);
}
if (shot) await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
await browser.close();
if (failed) { console.error("dashboard workspaces test failed: " + failed); process.exit(1); }
console.log("dashboard workspaces test passed");
