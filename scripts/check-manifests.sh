#!/usr/bin/env bash
# Validates dist/kubernetes/ offline (docs/operations.md#kubernetes), as CI does: every manifest
# against the Kubernetes OpenAPI schemas that PyPI's kubernetes-validate carries, strictly (an
# unknown or misspelt field fails), for 1.30 (the first with securityContext.appArmorProfile) and
# the newest it knows; the ConfigMap's config.json as JSON with the keys the pods rely on; and the
# DaemonSet's uid and arguments against the Containerfile's. `kubectl create --dry-run=client` is no
# use offline: it asks an API server which kinds exist before it reads a file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.build-k8s-venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==1.37.0"
fi
manifests=(dist/kubernetes/*.yaml)
for version in 1.30.0 1.37.0; do
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}" \
    || { echo "check-manifests: dist/kubernetes/ does not validate against Kubernetes $version" >&2; exit 1; }
done
"$venv/bin/python" - <<'EOF'
import json, re, sys, yaml

def fail(message):
    sys.exit("check-manifests: " + message)

docs = {}
for path in ["dist/kubernetes/namespace.yaml", "dist/kubernetes/configmap.yaml", "dist/kubernetes/daemonset.yaml"]:
    for doc in yaml.safe_load_all(open(path)):
        docs[doc["kind"]] = doc
config = json.loads(docs["ConfigMap"]["data"]["config.json"])
known = {"catalog", "trustedKeys", "metrics", "plugins", "updates", "revokedKeys", "catalogSignatures"}
if set(config) - known:
    fail(f"configmap.yaml's config.json has keys this check does not know: {sorted(set(config) - known)}")
if not config.get("catalog", "").startswith(("http://", "https://")):
    fail("configmap.yaml's config.json needs an http(s) catalog")
listen = config.get("metrics", {}).get("listen", "")
pod = docs["DaemonSet"]["spec"]["template"]
port = pod["metadata"]["annotations"]["prometheus.io/port"]
if not listen.endswith(":" + port) or listen.startswith("127."):
    fail(f"metrics.listen {listen!r} must serve the annotated port {port} on the pod's address")
containers = {c["name"]: c for c in pod["spec"]["containers"]}
supervisor = containers["supervisor"]
if str(supervisor["ports"][0]["containerPort"]) != port:
    fail("the metrics containerPort and the prometheus.io/port annotation differ")
containerfile = open("dist/container/Containerfile").read()
uid = re.search(r"^USER (\d+):(\d+)$", containerfile, re.M)
if not uid or int(uid.group(1)) != pod["spec"]["securityContext"]["runAsUser"]:
    fail("the DaemonSet's runAsUser is not the Containerfile's USER")
cmd = json.loads(re.search(r"^CMD (\[.*\])$", containerfile, re.M).group(1))
if supervisor["args"] != cmd:
    fail(f"the supervisor container's args {supervisor['args']} are not the Containerfile's CMD {cmd}")
context = supervisor["securityContext"]
if context.get("capabilities", {}).get("drop") != ["ALL"] or context.get("capabilities", {}).get("add"):
    fail("the supervisor container must drop every capability and add none")
if context.get("allowPrivilegeEscalation") is not False:
    fail("the supervisor container must not allow privilege escalation")
if context.get("privileged"):
    fail("the supervisor container must not be privileged")
print("check-manifests: dist/kubernetes/ validates against Kubernetes 1.30 and 1.37 (strict), and agrees with the Containerfile")
EOF
