"""Offline checks of deploy/kubernetes that a schema cannot make (run by `cargo xtask kubernetes`).

usage: check.py RENDERED.yaml SERVER_HELP.txt
       check.py --render KUSTOMIZATION_DIR OUT.yaml   (without kubectl: resources, namespace,
                                                       labels and images of this layout only)

Checks: three replicas; every UNIQUE_* variable is one `unique-server --help` lists; the
probes hit /healthz (liveness) and /readyz (readiness) on the container's port 7420; the pod
runs as a non-root user with an fsGroup, and the secret volume is mode 0440 (what the server
accepts under fsGroup); the Service, the PodDisruptionBudget and the ServiceMonitor select the
pods and name the Service's port.
"""

import sys

import yaml


def fail(message):
    sys.exit(f"deploy/kubernetes: {message}")


def render(directory, out):
    import os

    with open(os.path.join(directory, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    labels = {}
    for entry in kustomization.get("labels", []):
        labels.update(entry["pairs"])
    images = {i["name"]: i for i in kustomization.get("images", [])}
    docs = []
    for resource in kustomization["resources"]:
        with open(os.path.join(directory, resource)) as f:
            for doc in yaml.safe_load_all(f):
                doc["metadata"]["namespace"] = kustomization["namespace"]
                doc["metadata"].setdefault("labels", {}).update(labels)
                spec = doc.get("spec", {})
                selector = spec.get("selector", {})
                if doc["kind"] == "Service":
                    selector.update(labels)
                elif "matchLabels" in selector:
                    selector["matchLabels"].update(labels)
                template = spec.get("template")
                if template:
                    template["metadata"].setdefault("labels", {}).update(labels)
                    for c in template["spec"]["containers"]:
                        image = images.get(c["image"])
                        if image:
                            c["image"] = f'{image.get("newName", c["image"])}:{image["newTag"]}'
                docs.append(doc)
    with open(out, "w") as f:
        yaml.safe_dump_all(docs, f)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check(rendered, help_path):
    with open(rendered) as f:
        docs = {d["kind"]: d for d in yaml.safe_load_all(f) if d}
    with open(help_path) as f:
        help_text = f.read()
    for kind in ["Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor"]:
        if kind not in docs:
            fail(f"no {kind}")
    deployment = docs["Deployment"]
    if deployment["spec"]["replicas"] != 3:
        fail("the Deployment should run three servers")
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    if not selects(deployment["spec"]["selector"]["matchLabels"], pod_labels):
        fail("the Deployment's selector does not select its pods")
    security = pod["spec"]["securityContext"]
    if not security.get("runAsNonRoot") or not security.get("fsGroup"):
        fail("the pod must run as non-root with an fsGroup")
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    if ports.get("http") != 7420:
        fail(f"the container's http port is {ports.get('http')}, not 7420")
    for name in [e["name"] for e in container["env"]]:
        if f"[env: {name}=" not in help_text and f"[env: {name}]" not in help_text:
            fail(f"the container sets {name}, which unique-server --help does not list")
    env = {e["name"]: e.get("value") for e in container["env"]}
    if env.get("UNIQUE_LISTEN") != "0.0.0.0:7420":
        fail("UNIQUE_LISTEN must be 0.0.0.0:7420")
    for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        get = container.get(probe, {}).get("httpGet", {})
        if get.get("path") != path or get.get("port") not in ("http", 7420):
            fail(f"{probe} must GET {path} on port 7420")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    for volume in pod["spec"]["volumes"]:
        secret = volume.get("secret")
        if secret is None:
            continue
        if secret.get("defaultMode") != 0o440:
            fail(f"secret volume {volume['name']}: defaultMode {oct(secret.get('defaultMode', 0o644))}, "
                 "want 0440 (the server refuses a secret file others can read)")
        for item in secret.get("items", []):
            path = f"{mounts[volume['name']]}/{item['path']}"
            if path not in env.values():
                fail(f"secret file {path} is mounted but no UNIQUE_* variable names it")
    service = docs["Service"]
    if not selects(service["spec"]["selector"], pod_labels):
        fail("the Service does not select the pods")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    if service_ports.get("http", {}).get("port") != 7420:
        fail("the Service must expose port 7420 as http")
    if not selects(docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"], pod_labels):
        fail("the PodDisruptionBudget does not select the pods")
    monitor = docs["ServiceMonitor"]
    if not selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]):
        fail("the ServiceMonitor does not select the Service")
    for endpoint in monitor["spec"]["endpoints"]:
        if endpoint["port"] not in service_ports or endpoint.get("path") != "/metrics":
            fail(f"ServiceMonitor endpoint {endpoint}: not the Service's port, or not /metrics")
    print(f"deploy/kubernetes: {len(docs)} resources consistent with unique-server")


if __name__ == "__main__":
    if sys.argv[1] == "--render":
        render(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[1], sys.argv[2])
