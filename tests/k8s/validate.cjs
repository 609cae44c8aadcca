// SPDX-License-Identifier: Apache-2.0
// Validates Kubernetes manifests against the Kubernetes OpenAPI schemas bundled (and compiled
// for ajv) in the kubernetes-models package: every document of every file, by apiVersion and
// kind. Kubeflow PyTorchJob and KubeRay RayCluster are custom resources without bundled schemas:
// their pod templates are validated as core/v1 PodTemplate, the rest by the CRDs' required
// fields. Usage: node validate.cjs [--dump] FILE...  (--dump prints the documents as JSON)
// Exit 0 when all are valid, 1 with one line per problem otherwise.
'use strict';
const fs = require('fs');
const YAML = require('yaml');

const problems = [];
const docs = [];

function model(apiVersion, kind) {
  let mod;
  try {
    mod = require(`kubernetes-models/${apiVersion}/${kind}`);
  } catch (e) {
    return null;
  }
  return mod[kind] || null;
}

function validateAs(Cls, obj, where) {
  try {
    new Cls(obj).validate();
  } catch (e) {
    problems.push(`${where}: ${e.message}`);
  }
}

function podTemplate(tpl, where) {
  if (!tpl || typeof tpl !== 'object') {
    problems.push(`${where}: missing pod template`);
    return;
  }
  validateAs(model('v1', 'PodTemplate'), { metadata: { name: 'template' }, template: tpl }, where);
}

const custom = {
  'kubeflow.org/v1/PyTorchJob'(o, where) {
    const specs = (o.spec || {}).pytorchReplicaSpecs;
    if (!specs || typeof specs !== 'object' || !Object.keys(specs).length)
      return problems.push(`${where}: spec.pytorchReplicaSpecs is required`);
    for (const [type, rs] of Object.entries(specs)) {
      const w = `${where}: pytorchReplicaSpecs.${type}`;
      if (!['Master', 'Worker'].includes(type)) problems.push(`${w}: replica type must be Master or Worker`);
      if (rs.replicas !== undefined && !Number.isInteger(rs.replicas)) problems.push(`${w}.replicas must be an integer`);
      if (rs.restartPolicy !== undefined && !['Always', 'OnFailure', 'Never', 'ExitCode'].includes(rs.restartPolicy))
        problems.push(`${w}.restartPolicy must be Always, OnFailure, Never or ExitCode`);
      podTemplate(rs.template, `${w}.template`);
    }
  },
  'ray.io/v1/RayCluster'(o, where) {
    const spec = o.spec || {};
    if (!spec.headGroupSpec) return problems.push(`${where}: spec.headGroupSpec is required`);
    if (typeof spec.headGroupSpec.rayStartParams !== 'object' && spec.headGroupSpec.rayStartParams !== undefined)
      problems.push(`${where}: headGroupSpec.rayStartParams must be a map`);
    podTemplate(spec.headGroupSpec.template, `${where}: headGroupSpec.template`);
    (spec.workerGroupSpecs || []).forEach((g, i) => {
      const w = `${where}: workerGroupSpecs[${i}]`;
      if (typeof g.groupName !== 'string' || !g.groupName) problems.push(`${w}.groupName is required`);
      for (const k of ['replicas', 'minReplicas', 'maxReplicas'])
        if (g[k] !== undefined && !Number.isInteger(g[k])) problems.push(`${w}.${k} must be an integer`);
      podTemplate(g.template, `${w}.template`);
    });
  },
};

const args = process.argv.slice(2);
const dump = args[0] === '--dump';
for (const file of dump ? args.slice(1) : args) {
  const text = fs.readFileSync(file, 'utf8');
  const parsed = YAML.parseAllDocuments(text, { uniqueKeys: true });
  parsed.forEach((d, i) => {
    const where0 = `${file}: document ${i + 1}`;
    for (const e of d.errors) problems.push(`${where0}: YAML: ${e.message.split('\n')[0]}`);
    if (d.errors.length) return;
    const o = d.toJS();
    if (o === null || o === undefined) return;
    const where = `${where0} (${o.kind || '?'} ${(o.metadata || {}).name || '?'})`;
    if (!o.apiVersion || !o.kind) return problems.push(`${where}: apiVersion and kind are required`);
    if (!o.metadata || !o.metadata.name) problems.push(`${where}: metadata.name is required`);
    docs.push(o);
    const key = `${o.apiVersion}/${o.kind}`;
    if (custom[key]) return custom[key](o, where);
    const Cls = model(o.apiVersion, o.kind);
    if (!Cls) return problems.push(`${where}: no schema for ${key}`);
    validateAs(Cls, o, where);
  });
}
if (dump) process.stdout.write(JSON.stringify(docs) + '\n');
for (const p of problems) console.error(p);
if (!dump) console.error(`${docs.length} documents, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
