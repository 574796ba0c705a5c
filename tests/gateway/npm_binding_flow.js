// Two tenants drive a running owx gateway with OpenWhisk's npm client: A shares a package, B binds
// it and invokes through the binding. Prints what B saw as JSON.
// Usage: OW_APIHOST=... OW_AUTH_A=uuid:key OW_AUTH_B=uuid:key OW_NAMESPACE_A=ns node npm_binding_flow.js SUFFIX
const openwhisk = require('openwhisk');

const suffix = process.argv[2];
const nsA = process.env.OW_NAMESPACE_A;
const owA = openwhisk({ apihost: process.env.OW_APIHOST, api_key: process.env.OW_AUTH_A });
const owB = openwhisk({ apihost: process.env.OW_APIHOST, api_key: process.env.OW_AUTH_B });
const code = 'def main(args):\n    return args\n';
const kv = (values) => Object.entries(values).map(([key, value]) => ({ key, value }));
const statusOf = (promise) => promise.then(() => 200, (err) => err.statusCode);

async function flow() {
  const shared = `shared-${suffix}`;
  const hidden = `hidden-${suffix}`;
  const binding = `mine-${suffix}`;
  await owA.packages.create({ name: shared, package: { publish: true, parameters: kv({ p: 'pkg', q: 'pkg', r: 'pkg' }) } });
  await owA.actions.create({ name: `${shared}/echo`, action: { exec: { kind: 'python:3', code }, parameters: kv({ r: 'act' }) } });
  await owA.packages.create({ name: hidden });
  const seen = {};
  seen.publicPackages = (await owB.packages.list({ namespace: nsA })).map((p) => p.name);
  seen.hiddenStatus = await statusOf(owB.packages.get({ name: `/${nsA}/${hidden}` }));
  seen.bindHiddenStatus = await statusOf(owB.packages.create({ name: `bad-${suffix}`, package: { binding: { namespace: nsA, name: hidden } } }));
  seen.created = await owB.packages.create({ name: binding, package: { binding: { namespace: nsA, name: shared }, parameters: kv({ q: 'bind' }) } });
  seen.binding = await owB.packages.get({ name: binding });
  seen.viaBinding = await owB.actions.invoke({ name: `${binding}/echo`, blocking: true, result: true, params: { s: 'inv' } });
  seen.direct = await owB.actions.invoke({ name: `/${nsA}/${shared}/echo`, blocking: true, result: true });
  seen.putIntoBindingStatus = await statusOf(owB.actions.create({ name: `${binding}/planted`, action: { exec: { kind: 'python:3', code } } }));
  seen.deleted = await owB.packages.delete({ name: binding });
  return seen;
}

flow().then((seen) => { console.log(JSON.stringify(seen)); }).catch((err) => {
  console.error(err.stack || err);
  process.exit(1);
});
