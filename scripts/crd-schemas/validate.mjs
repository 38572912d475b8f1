// Validate custom resources against their published CRD schemas.
//
// stdin: a JSON array of Kubernetes objects. stdout: a JSON array, one entry per
// object: {"ok": true} | {"ok": false, "error": "..."} | {"ok": null, "error": "no schema ..."}.
// The schemas are the CRDs' openAPIV3Schema as published by each project, compiled to
// validators by the kubernetes-models packages (package.json pins their versions).
import { readFileSync } from "node:fs";

const PACKAGES = {
  "gateway.networking.k8s.io": "@kubernetes-models/gateway-api",
  "networking.istio.io": "@kubernetes-models/istio",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

async function check(obj) {
  const [group, version] = String(obj.apiVersion || "").split("/");
  const pkg = PACKAGES[group];
  if (!pkg || !version) return { ok: null, error: `no schema for ${obj.apiVersion} ${obj.kind}` };
  let mod;
  try {
    mod = await import(`${pkg}/${group}/${version}/${obj.kind}`);
  } catch (e) {
    return { ok: null, error: `no schema for ${obj.apiVersion} ${obj.kind} in ${pkg}` };
  }
  const Model = mod[obj.kind];
  try {
    new Model(obj).validate();
    return { ok: true };
  } catch (e) {
    return { ok: false, error: String(e.message || e) };
  }
}

const objects = JSON.parse(readFileSync(0, "utf8"));
const out = [];
for (const obj of objects) out.push(await check(obj));
process.stdout.write(JSON.stringify(out));
