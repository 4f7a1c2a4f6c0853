#!/usr/bin/python3
# Runs the pods of deploy/k8s/*.yaml as local processes, with the environment and command each
# controller would give them, so the manifests cannot rot: run_manifests.py REPO BIN_DIR PORT.
"""What the controllers do, and what this test changes to run on one CPU machine.

Kubeflow training-operator (PyTorchJob, non-elastic): one pod per replica; it appends
MASTER_ADDR=<job>-master-0, MASTER_PORT=<the container port named pytorchjob-port>,
WORLD_SIZE=<all replicas>, RANK=<0 for the master, 1+i for worker i> to every container's env.
Job controller (completionMode: Indexed): pod i gets JOB_COMPLETION_INDEX=i and the DNS name
<job>-<i>.<subdomain> through the headless Service. Kubelet: env values from secretKeyRef,
then $(VAR) expanded in env values, command and args ($$ is a literal $).

Changed here: DNS names of pods resolve to 127.0.0.1, the rendezvous port becomes PORT (the
test's range), workingDir (/opt/zero, the image's copy of this repository) is REPO, BIN_DIR is
first on PATH, --device cuda becomes cpu and --steps 3 keeps it short.
"""
import os
import re
import secrets
import subprocess
import sys

import yaml

REPO, BIN_DIR, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
STEPS = "3"


def expand(text, env):
    """Kubernetes' $(VAR) expansion: defined variables are replaced, others stay, $$ -> $."""
    def one(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, str(text))


def container_env(container, injected, secret_values):
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secret_values[(ref["name"], ref["key"])]
    env.update(injected)
    return env


def adapt(words, hosts, container_port):
    """The single-machine changes listed above, applied to the expanded command line."""
    out = []
    for w in words:
        for h in hosts:
            w = w.replace(h, "127.0.0.1")
        if w == f"--master_port={container_port}":
            w = f"--master_port={PORT}"
        out.append(w)
    for flag, value in (("--device", "cpu"), ("--steps", STEPS)):
        if flag in out:
            out[out.index(flag) + 1] = value
    return out


def pod_process(name, container, injected, secret_values, hosts, container_port):
    env = container_env(container, injected, secret_values)
    argv = [expand(w, env) for w in container.get("command", []) + container.get("args", [])]
    argv = adapt(argv, hosts, container_port)
    proc_env = dict(os.environ)
    proc_env.update({k: ("127.0.0.1" if v in hosts else v) for k, v in env.items()})
    if "MASTER_PORT" in env:
        proc_env["MASTER_PORT"] = str(PORT)
    proc_env["PATH"] = BIN_DIR + os.pathsep + proc_env.get("PATH", "")
    proc_env["OMP_NUM_THREADS"] = "1"
    assert container.get("workingDir") == "/opt/zero", f"{name}: workingDir is not /opt/zero"
    print(f"{name}: {' '.join(argv)}", flush=True)
    return name, subprocess.Popen(argv, cwd=REPO, env=proc_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)


def secret_values_of(path):
    """A fresh token for every key of the Secret manifest (what `kubectl create secret` does)."""
    doc = yaml.safe_load(open(path))
    return {(doc["metadata"]["name"], k): secrets.token_hex(16) for k in doc["stringData"]}


def pytorchjob_pods(doc, secret_values):
    name = doc["metadata"]["name"]
    specs = doc["spec"]["pytorchReplicaSpecs"]
    order = [("Master", specs["Master"])] + ([("Worker", specs["Worker"])] if "Worker" in specs else [])
    world = sum(int(s.get("replicas", 1)) for _, s in order)
    assert int(specs["Master"].get("replicas", 1)) == 1, "a PyTorchJob has one master"
    master = f"{name}-master-0"
    pods, rank = [], 0
    for kind, spec in order:
        for i in range(int(spec.get("replicas", 1))):
            container = spec["template"]["spec"]["containers"][0]
            port = next(p["containerPort"] for p in container.get("ports", [])
                        if p.get("name") == "pytorchjob-port")
            injected = {"MASTER_ADDR": master, "MASTER_PORT": str(port),
                        "WORLD_SIZE": str(world), "RANK": str(rank), "PYTHONUNBUFFERED": "0"}
            pods.append(pod_process(f"{name}-{kind.lower()}-{i}", container, injected,
                                    secret_values, [master], port))
            rank += 1
    return pods


def indexed_job_pods(docs, secret_values):
    job = next(d for d in docs if d["kind"] == "Job")
    service = next(d for d in docs if d["kind"] == "Service")
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    assert service["spec"]["clusterIP"] == "None", "the Service must be headless"
    assert pod["subdomain"] == service["metadata"]["name"], "subdomain must name the Service"
    name, n = job["metadata"]["name"], int(spec["completions"])
    hosts = [f"{name}-{i}.{pod['subdomain']}" for i in range(n)]
    container = pod["containers"][0]
    port = container["ports"][0]["containerPort"]
    return [pod_process(f"{name}-{i}", container, {"JOB_COMPLETION_INDEX": str(i)}, secret_values,
                        hosts, port) for i in range(n)]


def wait_all(pods, nodes):
    ok = True
    for i, (name, proc) in enumerate(pods):
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for _, p in pods:
                p.kill()
            print(f"FAIL: {name} did not finish within 240 s")
            return False
        print("\n".join(f"{name}| {line}" for line in out.splitlines()))
        if proc.returncode != 0:
            print(f"FAIL: {name} exited with {proc.returncode}")
            ok = False
        if f"ranks {i}-{i} of {nodes}" not in out:
            print(f"FAIL: {name} did not run rank {i} of {nodes}")
            ok = False
        if i == 0 and f"gpt_train: done, {STEPS} optimizer steps" not in out:
            print(f"FAIL: {name} (rank 0) did not finish training")
            ok = False
    return ok


def main():
    k8s = os.path.join(REPO, "deploy", "k8s")
    secret_values = secret_values_of(os.path.join(k8s, "secret.yaml"))
    ok = True
    job = yaml.safe_load(open(os.path.join(k8s, "pytorchjob.yaml")))
    pods = pytorchjob_pods(job, secret_values)
    ok &= wait_all(pods, len(pods))
    docs = list(yaml.safe_load_all(open(os.path.join(k8s, "indexed-job.yaml"))))
    pods = indexed_job_pods(docs, secret_values)
    ok &= wait_all(pods, len(pods))
    print("k8s manifests: all pods trained" if ok else "k8s manifests: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
