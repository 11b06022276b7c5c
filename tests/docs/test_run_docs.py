"""The doc-test runner itself (tests/docs/run_docs.py): pages written here, run through it.

Every rule of docs/conventions.md "Documentation that runs" that the runner enforces has a page
that must pass and one that must fail, so the runner cannot quietly accept drift.
"""
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_docs.py")
sys.path.insert(0, HERE)
import run_docs  # noqa: E402

FENCE = "```"


def run(tmp_path, text, *args, shared=None, name="page.md"):
    page = tmp_path / name
    page.write_text(text)
    env = dict(os.environ)
    if shared is not None:
        env["GGUFKIT_SHARED"] = shared
    p = subprocess.run([sys.executable, RUNNER, *args, str(page)], env=env,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr, page


def console(body, tags=""):
    return f"{FENCE}console{(' ' + tags) if tags else ''}\n{body}\n{FENCE}\n"


@pytest.fixture(autouse=True)
def need_build():
    binf = os.environ.get("GGUFKIT_BIN")
    if not binf or not os.access(os.path.join(binf, "gguf-inspect"), os.X_OK):
        pytest.skip("the tools are not built (run through ctest)")


def test_matching_output_passes(tmp_path):
    rc, out, _ = run(tmp_path, console("$ echo hello\nhello"))
    assert rc == 0, out
    assert "1 example(s) run, 0 failed" in out


def test_drift_fails_with_a_diff(tmp_path):
    rc, out, _ = run(tmp_path, console("$ echo hello\nhallo"))
    assert rc == 1, out
    assert "FAIL" in out and "- hallo" in out and "+ hello" in out


def test_missing_and_extra_lines_fail(tmp_path):
    assert run(tmp_path, console("$ printf 'a\\nb\\n'\na"))[0] == 1
    assert run(tmp_path, console("$ printf 'a\\n'\na\nb"))[0] == 1


def test_continued_commands(tmp_path):
    assert run(tmp_path, console("$ echo one \\\n    two\none two"))[0] == 0


def test_exit_codes_are_checked(tmp_path):
    rc, out, _ = run(tmp_path, console("$ sh -c 'echo no; exit 3'\nno"))
    assert rc == 1 and "exit code 3, the page says 0" in out
    assert run(tmp_path, console("$ sh -c 'echo no; exit 3'\nno\n[exit 3]"))[0] == 0
    assert run(tmp_path, console("$ true\n[exit 1]"))[0] == 1


def test_placeholders(tmp_path):
    page = console("$ printf 'took 0.25 s (12 MB/s)\\nname .x.3f9a.tmp here\\n1\\n2\\n3\\nend\\n'\n"
                   "took [N] s ([N] MB/s)\nname .x.[...].tmp here\n...\nend")
    assert run(tmp_path, page)[0] == 0
    # [N] is a number, not any text; `...` lines do not excuse a wrong line after them
    assert run(tmp_path, console("$ echo 'took ab s'\ntook [N] s"))[0] == 1
    assert run(tmp_path, console("$ printf '1\\n2\\nend\\n'\n...\nfin"))[0] == 1
    # an excerpt: `...` at both ends, a line in the middle must be there
    assert run(tmp_path, console("$ printf '1\\n2\\n3\\n'\n...\n2\n..."))[0] == 0
    assert run(tmp_path, console("$ printf '1\\n2\\n3\\n'\n...\n4\n..."))[0] == 1


def test_stdout_and_stderr_in_terminal_order(tmp_path):
    page = console("$ python3 -c \"import sys; print('a'); print('b', file=sys.stderr); print('c')\"\n"
                   "a\nb\nc")
    rc, out, _ = run(tmp_path, page)
    assert rc == 0, out


def test_setup_blocks_and_files_carry_over(tmp_path):
    page = (f"{FENCE}sh setup\necho made >input.txt\n{FENCE}\n\n"
            + console("$ cat input.txt\nmade\n$ echo more >>input.txt") + "\n"
            + console("$ cat input.txt\nmade\nmore"))
    rc, out, _ = run(tmp_path, page)
    assert rc == 0, out
    failing = f"{FENCE}sh setup\nfalse\n{FENCE}\n" + console("$ echo x\nx")
    rc, out, _ = run(tmp_path, failing)
    assert rc == 1 and "setup block exited 1" in out


def test_tools_on_path_and_environment(tmp_path):
    page = console("$ gguf-gen model --arch llama -q m.gguf && gguf-inspect m.gguf | head -1\n"
                   "file:        m.gguf\n$ test -d \"$GGUFKIT_SRC/docs\" && echo src ok\nsrc ok")
    rc, out, _ = run(tmp_path, page)
    assert rc == 0, out


def test_shared_blocks_skip_when_absent(tmp_path):
    page = (f"{FENCE}sh setup shared\nls \"$GGUFKIT_SHARED\"\n{FENCE}\n"
            + console("$ echo real\nreal", "shared"))
    rc, out, _ = run(tmp_path, page, shared=str(tmp_path / "no-such-folder"))
    assert rc == 77, out
    assert "SKIP" in out and "needs ../shared/testdata" in out
    rc, out, _ = run(tmp_path, page + console("$ echo here\nhere"),
                     shared=str(tmp_path / "no-such-folder"))
    assert rc == 0 and "1 example(s) run, 0 failed, 1 skipped" in out
    os.mkdir(tmp_path / "shared")
    assert run(tmp_path, page, shared=str(tmp_path / "shared"))[0] == 0


def test_gpu_blocks_run_only_with_gpu(tmp_path):
    page = console("$ echo gpu\nnot what it prints", "gpu")
    assert run(tmp_path, page)[0] == 77
    assert run(tmp_path, page, "--gpu")[0] == 1
    both = page + console("$ echo cpu\ncpu")
    assert run(tmp_path, both)[0] == 0
    # --gpu runs the GPU examples only: the untagged one (which would fail) is not run
    rc, out, _ = run(tmp_path, console("$ echo gpu\ngpu", "gpu") + console("$ echo cpu\nxxx"),
                     "--gpu")
    assert rc == 0 and "1 example(s) run, 0 failed, 1 skipped" in out, out


def test_gpu2_blocks_need_two_gpus(tmp_path):
    page = console("$ echo two\ntwo", "gpu2")
    rc, out, _ = run(tmp_path, page, "--gpu")
    if run_docs.gpu_count() < 2:
        assert rc == 77 and "needs two GPUs" in out, out
    else:
        assert rc == 0, out


def test_commands_outside_console_blocks_are_refused(tmp_path):
    rc, out, _ = run(tmp_path, "Text.\n\n    $ gguf-inspect x.gguf\n    out\n")
    assert rc == 1 and "indented block" in out
    rc, out, _ = run(tmp_path, f"{FENCE}sh\n$ echo x\n{FENCE}\n")
    assert rc == 1 and "```sh block" in out
    # a markdown block shows a page's source: allowed
    assert run(tmp_path, f"````markdown\n{FENCE}console\n$ echo x\nx\n{FENCE}\n````\n")[0] == 0
    rc, out, _ = run(tmp_path, f"{FENCE}console nosuchtag\n$ echo x\nx\n{FENCE}\n")
    assert rc == 1 and "unknown tag" in out
    rc, out, _ = run(tmp_path, f"{FENCE}console\noutput first\n$ echo x\n{FENCE}\n")
    assert rc == 1 and "must start with" in out


def test_links_must_resolve(tmp_path):
    (tmp_path / "there.md").write_text("# there\n")
    assert run(tmp_path, "See [there](there.md#x) and [web](https://example.org).\n")[0] == 0
    rc, out, _ = run(tmp_path, "See [gone](gone.md).\n")
    assert rc == 1 and "gone.md" in out


def test_page_without_examples_passes(tmp_path):
    rc, out, _ = run(tmp_path, "# Nothing to run\n\nJust text.\n")
    assert rc == 0 and "no examples" in out


def test_update_rewrites_output_and_keeps_placeholders(tmp_path):
    page = console("$ printf 'took 0.5 s\\nnew line\\n1\\n2\\nlast\\n'; exit 2\n"
                   "took [N] s\nold line\n...\nlast")
    rc, out, path = run(tmp_path, page, "--update")
    assert rc == 1, out
    text = path.read_text()
    assert "took [N] s\nnew line\n...\nlast\n[exit 2]\n" in text, text
    assert run(tmp_path, text)[0] == 0


def test_align_prefers_pairing_lines():
    cost, steps = run_docs.align(["...", "b2", "c"], ["a", "b", "c"])
    assert cost > 0
    assert [s[0] for s in steps] == ["ellipsis", "subst", "match"]
    assert run_docs.updated_output(["...", "b2", "c"], ["a", "b", "c"], steps) == ["...", "b", "c"]


def test_exported_variables_of_setup_blocks_carry_over(tmp_path):
    page = (f"{FENCE}sh setup\nexport GREETING=hello\nPLAIN=not-exported\n{FENCE}\n"
            + console('$ echo "$GREETING [$PLAIN]"\nhello []')
            # an example's own variables do not carry over
            + console("$ export GREETING=changed\n$ echo $GREETING\nhello"))
    rc, out, _ = run(tmp_path, page)
    assert rc == 0, out
    # a later page of the same run starts without them
    other = tmp_path / "other.md"
    other.write_text(console('$ echo "[$GREETING]"\n[]'))
    rc, out, _ = run(tmp_path, page, str(other))
    assert rc == 0 and "FAIL" not in out, out


def test_background_processes_are_stopped_when_the_page_ends(tmp_path):
    pidfile = tmp_path / "pid"
    page = (f"{FENCE}sh setup\nsleep 300 >/dev/null 2>&1 &\necho $! >{pidfile}\n{FENCE}\n"
            + console(f"$ kill -0 $(cat {pidfile}) && echo running\nrunning"))
    rc, out, _ = run(tmp_path, page)
    assert rc == 0, out
    pid = int(pidfile.read_text())
    def stopped():  # gone, or a zombie waiting for init to reap it (seconds on some VMs)
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return True
    deadline = time.monotonic() + 30
    while not stopped() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not stopped():
        os.kill(pid, 9)
        pytest.fail(f"the background process {pid} outlived its page")


def test_teardown_blocks_run_after_failures(tmp_path):
    marker = tmp_path / "torn-down"
    teardown = f"{FENCE}sh teardown\necho done >{marker}\n{FENCE}\n"
    # at the end of the page, whatever stands after it, also when an example failed
    page = teardown + console("$ echo a\nb")
    rc, out, _ = run(tmp_path, page)
    assert rc == 1 and marker.read_text() == "done\n", out
    marker.unlink()
    # and when a setup block failed
    rc, out, _ = run(tmp_path, f"{FENCE}sh setup\nfalse\n{FENCE}\n" + console("$ true") + teardown)
    assert rc == 1 and "setup block exited 1" in out and marker.exists(), out
    # not compared, but a failing teardown fails the page
    assert run(tmp_path, console("$ true") + f"{FENCE}sh teardown\necho x\n{FENCE}\n")[0] == 0
    rc, out, _ = run(tmp_path, console("$ true") + f"{FENCE}sh teardown\nexit 4\n{FENCE}\n")
    assert rc == 1 and "teardown block exited 4" in out, out
    # a teardown whose need is not met is skipped with its blocks
    rc, out, _ = run(tmp_path, console("$ true") + f"{FENCE}sh teardown root\nexit 4\n{FENCE}\n")
    assert rc == 0, out


def test_root_blocks_run_only_with_root(tmp_path):
    page = console("$ echo mounted\nmounted", "root")
    rc, out, _ = run(tmp_path, page)
    assert rc == 77 and "--root" in out, out
    rc, out, _ = run(tmp_path, page, "--root")
    if os.geteuid() == 0:
        assert rc == 0, out
    else:
        assert rc == 77 and "not running as root" in out, out
