// Runs one file's generated checks in the sandbox: each test registered through `node:test`
// (`test`, `it`, `describe`) in this process, then each probe expression, printing one marked
// JSON line per result. Always exits 0: what passed is read from the marked lines.
'use strict';
const fs = require('fs');
const path = require('path');
const util = require('util');
const Module = require('module');

const plan = JSON.parse(fs.readFileSync(path.join(__dirname, 'plan.json'), 'utf8'));
const write = process.stdout.write.bind(process.stdout);
const emit = (fields) => write(plan.marker + ' ' + JSON.stringify(fields) + '\n');

let registered = [];
const test = (name, a, b) => registered.push([String(name), typeof a === 'function' ? a : b]);
test.test = test;
test.it = test;
test.describe = (name, fn) => fn();
test.before = test.after = test.beforeEach = test.afterEach = () => {};
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === 'node:test' || request === 'test') return test;
  return load.call(this, request, ...rest);
};

const describe = (e) => (e && e.name ? e.name : 'Error') + ': ' + String(e && e.message).slice(0, 300);

async function main() {
  for (const file of plan.tests) {
    registered = [];
    const full = path.resolve(file);
    let loaded = true;
    try {
      require(full);
    } catch (e) {
      emit({ test: file, outcome: 'error', error: describe(e) });
      loaded = false;
      registered = [];
    }
    for (const [name, fn] of registered) {
      const id = file + '::' + name;
      try {
        await fn();
        emit({ test: id, outcome: 'passed', error: null });
      } catch (e) {
        emit({ test: id, outcome: 'failed', error: describe(e) });
      }
    }
    const source = fs.readFileSync(full, 'utf8');
    let imports = source.split('\n').filter((l) => /require\(/.test(l) && !/node:test|node:assert|'assert'|"assert"/.test(l)).join('\n');
    if (!loaded) {
      // A test file that cannot be loaded (a wrong module path) still holds inputs written
      // from the description: evaluate them against the file's own exports.
      if (!plan.subject) continue;
      imports = 'const __subject = require(' + JSON.stringify(path.resolve(plan.subject)) + ');\n' +
        'const { ' + (plan.names || []).join(', ') + ' } = __subject;';
    }
    const probes = plan.probes[file] || [];
    let fns;
    try {
      fns = new Function('require', imports + '\nreturn [' + probes.map((p) => '() => (' + p + ')').join(',\n') + '];')(Module.createRequire(full));
    } catch (e) {
      continue;
    }
    for (let i = 0; i < fns.length; i++) {
      let output;
      try {
        let value = fns[i]();
        if (value instanceof Promise) value = await value;
        output = util.inspect(value, { depth: 6 });
      } catch (e) {
        output = 'raises ' + (e && e.name ? e.name : 'Error');
      }
      emit({ probe: file + '#' + i, output: output.slice(0, 500) });
    }
  }
}
main().then(() => process.exit(0), () => process.exit(0));
