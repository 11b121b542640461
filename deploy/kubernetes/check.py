"""The rules of deploy/kubernetes (docs/mesh.md) that a schema cannot see, checked on a rendered
manifest: `python check.py rendered.yaml`. Exits 1 with every broken rule."""

import sys

import yaml


def main(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    errors = []

    def need(ok, why):
        if not ok:
            errors.append(why)

    for kind in ["Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler"]:
        need(len(by_kind.get(kind, [])) == 1, f"one {kind}")
    if errors:
        return report(path, errors)
    deploy = by_kind["Deployment"][0]
    pdb = by_kind["PodDisruptionBudget"][0]
    hpa = by_kind["HorizontalPodAutoscaler"][0]
    config = by_kind["ConfigMap"][0]
    router = yaml.safe_load(config["data"]["router.yaml"])
    yaml.safe_load(config["data"]["routing-table.yaml"])  # parses

    need(pdb["apiVersion"] == "policy/v1", "PodDisruptionBudget is policy/v1")
    need(hpa["apiVersion"] == "autoscaling/v2", "HorizontalPodAutoscaler is autoscaling/v2")
    need(deploy["spec"].get("replicas", 1) >= 2, "replicas >= 2")
    need(hpa["spec"].get("minReplicas", 1) >= 2, "the HPA keeps at least 2 replicas")

    pod = deploy["spec"]["template"]["spec"]
    [container] = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    admin_port = int(router["admin_listen"].rsplit(":", 1)[1])
    listen_port = int(router["listen"].rsplit(":", 1)[1])
    need(ports.get("admin") == admin_port, "container port `admin` is admin_listen's")
    need(ports.get("edge") == listen_port, "container port `edge` is listen's")
    for probe, route in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
        get = container.get(probe, {}).get("httpGet", {})
        need(get.get("path") == route and get.get("port") == "admin", f"{probe} is GET {route} on the admin port")

    # The kubelet probes the pod's IP: admin_listen is not loopback, so by docs/admin.md a token,
    # from a Secret mounted as a file.
    need(not router["admin_listen"].startswith("127."), "admin_listen reachable by the kubelet")
    token = (router.get("admin") or {}).get("token_file", "")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}

    def volume_of(file):
        for at, m in mounts.items():
            if file.startswith(at.rstrip("/") + "/"):
                return volumes.get(m["name"], {})
        return {}

    need("secret" in volume_of(token), "admin.token_file is in a mounted Secret")
    for m in mounts.values():
        need("subPath" not in m, f"no subPath (it never updates): {m['mountPath']}")
    config_path = container["args"][container["args"].index("--config") + 1]
    need(volume_of(config_path).get("configMap", {}).get("name") == config["metadata"]["name"],
         "the config is the ConfigMap, mounted as a directory")

    drain_ms = router.get("shutdown", {}).get("drain_delay_ms", 0)
    grace_ms = router.get("shutdown", {}).get("grace_ms", 0)
    sleep = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds")
    need(sleep is not None and sleep * 1000 == drain_ms, f"preStop sleeps shutdown.drain_delay_ms ({drain_ms} ms)")
    need(pod.get("terminationGracePeriodSeconds", 30) * 1000 > (sleep or 0) * 1000 + drain_ms + grace_ms,
         "terminationGracePeriodSeconds outlasts preStop + drain_delay_ms + grace_ms")

    res = container.get("resources", {})
    need(all(k in res.get("requests", {}) for k in ("cpu", "memory")), "cpu and memory requests")
    need(all(k in res.get("limits", {}) for k in ("cpu", "memory")), "cpu and memory limits")
    sc, psc = container.get("securityContext", {}), pod.get("securityContext", {})
    need(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0, "runs as non-root")
    need(sc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
    need(sc.get("allowPrivilegeEscalation") is False, "no privilege escalation")

    # Every file the router reads is mounted.
    files = [token, config_path]
    tls = router.get("tls") or {}
    for c in tls.get("certificates", []):
        files += [c["cert"], c["key"]]
    if tls.get("client_auth"):
        files.append(tls["client_auth"]["ca"])
    table = yaml.safe_load(config["data"]["routing-table.yaml"])
    for region in (table.get("regions") or {}).values():
        files += [v for k, v in (region.get("tls") or {}).items() if k != "server_name"]
    for f in files:
        need(volume_of(f) != {}, f"{f} is in a mounted volume")
    return report(path, errors)


def report(path, errors):
    for e in errors:
        print(f"{path}: {e}", file=sys.stderr)
    if not errors:
        print(f"{path}: ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
