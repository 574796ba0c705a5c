// Drives a running owx gateway with OpenWhisk's official npm client and prints what it saw as JSON.
// Usage: OW_APIHOST=http://127.0.0.1:PORT OW_AUTH=uuid:key node npm_client_flow.js NAME
const openwhisk = require('openwhisk');

const name = process.argv[2];
const ow = openwhisk({ apihost: process.env.OW_APIHOST, api_key: process.env.OW_AUTH,
                     ignore_certs: process.env.OW_IGNORE_CERTS === 'true' });
const code = "def main(args):\n    print('hi from', args.get('who'))\n    return {'hello': args.get('who', 'world')}\n";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function activationWhenReady(id) {
  for (let i = 0; i < 200; i++) {
    try { return await ow.activations.get({ name: id }); } catch (err) {
      if (err.statusCode !== 404) throw err;
      await sleep(50);
    }
  }
  throw new Error('activation never recorded: ' + id);
}

async function flow() {
  const seen = {};
  seen.created = await ow.actions.create({ name, action: { exec: { kind: 'python:3', code } } });
  try { await ow.actions.create({ name, action: { exec: { kind: 'python:3', code } } }); } catch (err) {
    seen.duplicateStatus = err.statusCode;
  }
  seen.updated = await ow.actions.update({ name, action: { limits: { timeout: 20000 } } });
  seen.fetched = await ow.actions.get({ name });
  seen.listed = (await ow.actions.list()).map((a) => a.name);
  seen.result = await ow.actions.invoke({ name, blocking: true, result: true, params: { who: 'npm' } });
  const blocking = await ow.actions.invoke({ name, blocking: true, params: { who: 'blocking' } });
  seen.blockingStatus = blocking.response.status;
  const started = await ow.actions.invoke({ name, params: { who: 'async' } });
  seen.asyncId = started.activationId;
  seen.activation = await activationWhenReady(started.activationId);
  seen.activationResult = await ow.activations.result({ name: started.activationId });
  seen.activationLogs = await ow.activations.logs({ name: started.activationId });
  seen.activationList = (await ow.activations.list({ name })).map((a) => a.activationId);
  seen.deleted = await ow.actions.delete({ name });
  try { await ow.actions.get({ name }); } catch (err) { seen.afterDeleteStatus = err.statusCode; }
  return seen;
}

flow().then((seen) => { console.log(JSON.stringify(seen)); }).catch((err) => {
  console.error(err.stack || err);
  process.exit(1);
});
