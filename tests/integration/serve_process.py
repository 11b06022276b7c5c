"""`ref-forward serve` as a test's engine: started on a free loopback port (--port 0 prints the
URL), stopped by PID. Used by the check-engine tests and tests/bench/bench_diagnose.py.

    with Serve(ref_forward, "model.gguf", "--tp", "2", "--inject", "kv-b-rows") as s:
        ... s.url ...

A server that does not start raises RuntimeError with its last words, or, with
must_start=False, leaves url None and the reason in why (a fault the model cannot have).
"""
import select
import subprocess
import tempfile


class Serve:
    def __init__(self, ref_forward, model, *args, must_start=True):
        # stderr to a file: a pipe nobody reads could fill and stall the server
        self.err = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen([ref_forward, "serve", model, "--port", "0", *args],
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        ready = select.select([self.p.stdout], [], [], 120)[0]
        line = self.p.stdout.readline() if ready else ""
        self.url, self.why = None, None
        if "listening on" in line:
            self.url = line.split()[-1]
            return
        self.p.kill()
        self.p.wait()
        self.err.seek(0)
        self.why = (self.err.read().strip().splitlines() or [line])[-1]
        self.err.close()
        if must_start:
            raise RuntimeError(f"serve {model} {' '.join(args)}: {self.why}")

    def close(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(timeout=30)
        if not self.err.closed:
            self.err.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
