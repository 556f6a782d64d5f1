// Opens the writ dashboard in headless Chromium, starts a five-file batch from the form, and
// checks that each file's progress and the chosen model show up when it completes.
// Usage: node dashboard.mjs <writ base url> <screenshot path> [api key]
import { chromium } from "playwright-core";

const [base, shot, key] = process.argv.slice(2);
const files = ["app/main.py", "app/models.py", "app/util.py", "app/cli.py", "app/config.py"];
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = null;
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
try {
  page.on("pageerror", (e) => { failed = failed || `page error: ${e.message}`; });
  await page.goto(base + "/", { waitUntil: "load" });
  if (key) {
    // Without the key the page says so in plain words instead of failing silently.
    await page.waitForSelector("#error", { state: "visible", timeout: 10000 });
    const said = (await page.textContent("#error")) || "";
    if (!/API key/.test(said)) throw new Error(`expected a plain-words key error, saw: ${said}`);
    await page.fill("#key", key);
    await page.dispatchEvent("#key", "change");
  }
  for (let i = 0; i < files.length; i++) {
    if (i > 0) await page.click("#more-file");
    const row = page.locator("#rows .row").nth(i);
    await row.locator(".path").fill(files[i]);
    await row.locator(".desc").fill(`module ${i} of a tiny app`);
  }
  await page.fill("#task", "a tiny app");
  await page.click("#start");
  // Progress shows while the batch runs: a model still being asked for some file.
  await page.waitForSelector("#files .file .run", { timeout: 15000 });
  const during = await page.locator("#files .file").count();
  if (during !== files.length) throw new Error(`expected ${files.length} file cards while running, saw ${during}`);
  // Then every file ends written, with the chosen model named.
  await page.waitForFunction((n) => document.querySelectorAll("#files .file .result.ok").length === n, files.length, { timeout: 30000 });
  for (const f of files) {
    const card = page.locator(`#files .file[data-file="${f}"]`);
    const models = await card.locator("tr.model").count();
    if (models < 2) throw new Error(`${f}: expected a row per model, saw ${models}`);
    const chosen = (await card.locator(".chosen-model").textContent()) || "";
    if (!chosen.trim()) throw new Error(`${f}: no chosen model shown`);
  }
  // The cards turn green on each file's `file_written` event; the batch's state follows on its
  // `done` event, which comes after the closing commit: wait for it instead of racing it.
  await page.waitForFunction(() => !/following/.test(document.querySelector("#jobstate")?.textContent || ""), null, { timeout: 15000 });
  const state = await page.textContent("#jobstate");
  if (!/success/.test(state || "")) throw new Error(`batch state shown as: ${state}`);
  if (shot) await page.screenshot({ path: shot.replace(/\.png$/, "-batch.png"), fullPage: true });
  // The audit log tab and the file view with its preview.
  await page.click("#tab-audit");
  await page.waitForSelector("#ops tr", { timeout: 10000 });
  await page.locator("#ops tr").first().click();
  await page.waitForSelector("#preview", { timeout: 10000 });
  // The models' figures of the batch: a row per model that answered, with its candidates.
  await page.waitForSelector("#models tr td", { timeout: 10000 });
  const modelRows = await page.locator("#models tr").count();
  if (modelRows < 2) throw new Error(`expected a row per model in the models table, saw ${modelRows}`);
  const firstCandidates = Number(await page.locator("#models tr").first().locator("td").nth(1).textContent());
  if (!(firstCandidates >= files.length)) throw new Error(`expected at least ${files.length} candidates for the busiest model, saw ${firstCandidates}`);
} catch (e) {
  failed = failed || String(e && e.message || e);
}
if (shot) await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
await browser.close();
if (failed) { console.error("dashboard test failed: " + failed); process.exit(1); }
console.log("dashboard test passed");
