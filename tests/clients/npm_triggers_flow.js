// Drives triggers, rules, a package binding and the alarms feed of a running owx gateway with
// OpenWhisk's official npm client, and prints what it saw as JSON.
// Usage: OW_APIHOST=http://127.0.0.1:PORT OW_AUTH=uuid:key node npm_triggers_flow.js SUFFIX
const openwhisk = require('openwhisk');

const suffix = process.argv[2];
const ow = openwhisk({ apihost: process.env.OW_APIHOST, api_key: process.env.OW_AUTH });
const code = "def main(args):\n    return {'tick': args.get('tick'), 'manual': args.get('manual')}\n";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const action = `npm-act-${suffix}`;
const trigger = `npm-trg-${suffix}`;
const rule = `npm-rule-${suffix}`;
const feed = '/whisk.system/alarms/alarm';

async function statusOf(promise) {
  try { await promise; return 200; } catch (err) { return err.statusCode; }
}

async function flow() {
  const seen = {};
  await ow.actions.create({ name: action, action: { exec: { kind: 'python:3', code } } });
  seen.trigger = await ow.triggers.create({ name: trigger, trigger: { annotations: [{ key: 'feed', value: feed }] } });
  seen.feed = await ow.feeds.create({ name: feed, trigger, params: { cron: '* * * * * *', trigger_payload: { tick: 1 } } });
  seen.rule = await ow.rules.create({ name: rule, action, trigger });
  // fires start their activations without waiting (the first one cold): poll for 3 records, up to 20 s
  const deadline = Date.now() + 20000;
  do {
    await sleep(200);
    seen.ticks = (await ow.activations.list({ name: action, limit: 200 })).length;
  } while (seen.ticks < 3 && Date.now() < deadline);
  seen.feedRead = await ow.feeds.get({ name: feed, trigger });
  await ow.rules.disable({ name: rule });
  seen.disabled = (await ow.rules.get({ name: rule })).status;
  seen.feedDeleted = await ow.feeds.delete({ name: feed, trigger });
  await sleep(1200);
  const before = (await ow.activations.list({ name: action, limit: 200 })).length;
  seen.fireDisabled = await ow.triggers.invoke({ name: trigger, params: { manual: true } });
  await ow.rules.enable({ name: rule });
  seen.fired = await ow.triggers.invoke({ name: trigger, params: { manual: true } });
  for (let i = 0; i < 100; i++) {
    const now = await ow.activations.list({ name: action, limit: 200 });
    if (now.length > before) { seen.afterFire = now.length - before; break; }
    await sleep(100);
  }
  seen.triggerRecord = await ow.activations.get({ name: seen.fired.activationId });
  seen.rules = (await ow.rules.list()).map((r) => r.name);
  seen.triggers = (await ow.triggers.list()).map((t) => t.name);
  const published = `npm-pub-${suffix}`;
  await ow.packages.create({ name: published, package: { publish: true } });
  seen.binding = await ow.packages.create({ name: `npm-bind-${suffix}`, package: { binding: { namespace: '_', name: published } } });
  seen.ruleDeleted = await ow.rules.delete({ name: rule });
  seen.triggerDeleted = await ow.triggers.delete({ name: trigger });
  seen.afterDelete = await statusOf(ow.triggers.get({ name: trigger }));
  return seen;
}

flow().then((seen) => { console.log(JSON.stringify(seen)); }).catch((err) => {
  console.error(err.stack || err);
  process.exit(1);
});
