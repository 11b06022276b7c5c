#!/usr/bin/env python3
"""Run the examples of README.md and docs/*.md and compare their output (docs that run).

The format of a runnable example is documented in docs/conventions.md, section "Documentation
that runs". In short: a fenced ```console block holds `$ command` lines, each followed by its
expected output (stdout and stderr together) and, when the command does not exit 0, a last line
`[exit N]`; `...` alone on a line stands for any lines, `[...]` for any text within a line, `[N]`
for a number. ```sh setup blocks make the page's inputs (the variables they export carry over
to later blocks); ```sh teardown blocks run when the page ends, whatever happened (unmounting
what a setup mounted); processes a block leaves running in the background are stopped then.
Tags after the info word (`shared`, `gpu`, `gpu2`, `engine`, `root`) say what a block needs;
blocks whose need is not met are skipped (`--gpu`, on a GPU machine, runs the gpu/gpu2 blocks
only).

    run_docs.py [--build DIR] [--update] [--keep] [--gpu] [--only TAG] [--engine URL] [--root]
                [-v] [PAGE.md ...]

Without pages: README.md and every docs/*.md. Exit 0 every example ran and matched (or a page
has none), 1 a difference or a page error, 2 bad usage, 77 every example was skipped.
Environment (set by ctest, or derived from --build): GGUFKIT_BIN, GGUFKIT_GEN, GGUFKIT_SRC,
GGUFKIT_SHARED.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC_DEFAULT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KNOWN_TAGS = {"shared", "gpu", "gpu2", "engine", "root"}
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
ELLIPSIS = None  # the pattern of a `...` line
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


class PageError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Parsing


class Block:
    """A fenced block: kind 'console', 'setup', 'teardown' or 'other', its tags and lines."""

    def __init__(self, kind, info, tags, start, indent, lines):
        self.kind = kind
        self.info = info
        self.tags = tags
        self.start = start      # 1-based line number of the opening fence
        self.indent = indent    # the fence's indentation, removed from every content line
        self.lines = lines      # [(1-based line number, text without the indentation)]


class Example:
    """One `$ command` of a console block and its expected output."""

    def __init__(self, block, line, command, expected, exit_code, out_first, out_end):
        self.block = block
        self.line = line            # 1-based line of the `$ `
        self.command = command
        self.expected = expected    # expected output lines (the [exit N] line removed)
        self.exit_code = exit_code
        self.out_first = out_first  # 0-based file line range of the output, [exit N] included
        self.out_end = out_end


def strip_indent(text, n):
    i = 0
    while i < n and i < len(text) and text[i] == " ":
        i += 1
    return text[i:]


def parse_page(path, text):
    """Returns (blocks, lint errors as 'line: message')."""
    lines = text.split("\n")
    blocks, errors = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            # outside fences: a `$ ` command in an indented block is an example that never runs
            if re.match(r"^(?: {4,}|\t)\s*\$ ", lines[i]):
                errors.append(f"{i + 1}: a '$ ' command in an indented block: make it a "
                              "```console block (docs/conventions.md)")
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        words = info.split()
        start = i + 1
        body = []
        i += 1
        while i < len(lines):
            c = re.match(r"^ {0,3}(`{3,}|~{3,})\s*$", lines[i])
            if c and c.group(1)[0] == fence[0] and len(c.group(1)) >= len(fence):
                break
            body.append((i + 1, strip_indent(lines[i], indent)))
            i += 1
        else:
            errors.append(f"{start}: fenced block never closed")
        i += 1
        first = words[0] if words else ""
        tags = words[1:]
        if first == "console":
            kind = "console"
        elif first in ("sh", "bash") and ("setup" in tags or "teardown" in tags):
            kind = "setup" if "setup" in tags else "teardown"
            tags = [t for t in tags if t != kind]
        else:
            kind = "other"
        if kind != "other":
            for t in tags:
                if t not in KNOWN_TAGS:
                    errors.append(f"{start}: unknown tag '{t}' (known: "
                                  f"{', '.join(sorted(KNOWN_TAGS))})")
        elif first != "markdown":
            for ln, t in body:
                if t.startswith("$ "):
                    errors.append(f"{ln}: a '$ ' command in a ```{first or '(plain)'} block: "
                                  "make it a ```console block (docs/conventions.md)")
                    break
        blocks.append(Block(kind, info, tags, start, indent, body))
    return blocks, errors


def parse_examples(block):
    """Splits a console block into examples; raises PageError on a malformed block."""
    examples = []
    body = block.lines
    k = 0
    if body and not body[0][1].startswith("$"):
        raise PageError(f"{body[0][0]}: a console block must start with a '$ ' command")
    while k < len(body):
        ln, t = body[k]
        if not (t.startswith("$ ") or t == "$"):
            raise PageError(f"{ln}: expected a '$ ' command")
        cmd = [t[2:]]
        k += 1
        while cmd[-1].endswith("\\") and k < len(body):
            cmd.append(body[k][1])
            k += 1
        out = []
        while k < len(body) and not body[k][1].startswith("$ ") and body[k][1] != "$":
            out.append(body[k])
            k += 1
        # blank lines between one command's output and the next command are layout
        while out and out[-1][1].strip() == "":
            out.pop()
        exit_code = 0
        texts = [x[1] for x in out]
        if texts and EXIT_LINE.match(texts[-1].strip()):
            exit_code = int(EXIT_LINE.match(texts[-1].strip()).group(1))
            texts = texts[:-1]
        if out:
            out_first, out_end = out[0][0] - 1, out[-1][0]
        else:
            # no output: an insertion point right after the command
            out_first = out_end = body[k - 1][0]
        examples.append(Example(block, ln, "\n".join(cmd), texts, exit_code, out_first,
                                out_end))
    return examples


# ---------------------------------------------------------------------------------------------
# Matching


def compile_line(text):
    t = text.rstrip()
    if t.strip() == "...":
        return ELLIPSIS
    rx = re.escape(t)
    rx = rx.replace(re.escape("[...]"), ".*?").replace(re.escape("[N]"), NUMBER)
    return re.compile(rx + r"\Z")


MISS = 1000  # an expected line not printed, or a printed line not expected
SUBST = 1000  # one expected line printed differently: cheaper than a miss and an extra
ABSORB = 1  # a printed line that a `...` line stands for


def align(expected, actual):
    """Min-cost alignment of expected lines (with placeholders) to actual lines.

    A `...` line absorbs any run of actual lines at a tiny cost (so that, of two alignments, the
    one that pairs more lines wins); an expected line printed differently is a substitution.
    The output matches when the cost is below MISS. Returns (cost, steps), steps as
    ('match', e, a) | ('subst', e, a) | ('ellipsis', e, [a...]) | ('missing', e, None) |
    ('extra', None, a).
    """
    pats = [compile_line(e) for e in expected]
    m, n = len(pats), len(actual)
    cost = [[0] * (n + 1) for _ in range(m + 1)]
    for j in range(n - 1, -1, -1):
        cost[m][j] = cost[m][j + 1] + MISS
    for i in range(m - 1, -1, -1):
        p = pats[i]
        row, nxt = cost[i], cost[i + 1]
        row[n] = nxt[n] + (0 if p is ELLIPSIS else MISS)
        for j in range(n - 1, -1, -1):
            if p is ELLIPSIS:
                row[j] = min(nxt[j], row[j + 1] + ABSORB)
            else:
                best = min(nxt[j] + MISS, row[j + 1] + MISS)
                best = min(best, nxt[j + 1] + (0 if p.match(actual[j]) else SUBST))
                row[j] = best
    steps, i, j = [], 0, 0
    while i < m or j < n:
        if i == m:
            steps.append(("extra", None, j))
            j += 1
            continue
        p = pats[i]
        c = cost[i][j]
        if p is ELLIPSIS:
            run = []
            while j < n and c != cost[i + 1][j] and c == cost[i][j + 1] + ABSORB:
                run.append(j)
                j += 1
                c = cost[i][j]
            steps.append(("ellipsis", i, run))
            i += 1
            continue
        if j < n and p.match(actual[j]) and c == cost[i + 1][j + 1]:
            steps.append(("match", i, j))
            i, j = i + 1, j + 1
        elif j < n and c == cost[i + 1][j + 1] + SUBST:
            steps.append(("subst", i, j))
            i, j = i + 1, j + 1
        elif j < n and c == cost[i][j + 1] + MISS:
            steps.append(("extra", None, j))
            j += 1
        else:
            steps.append(("missing", i, None))
            i += 1
    return (0 if cost[0][0] < MISS else cost[0][0]), steps


def render_diff(expected, actual, steps, limit=80):
    out = []
    for kind, e, a in steps:
        if kind == "match":
            out.append("  " + actual[a])
        elif kind == "ellipsis":
            out.append(f"  ...    ({len(a)} line(s))")
        elif kind == "missing":
            out.append("- " + expected[e])
        elif kind == "subst":
            out.append("- " + expected[e])
            out.append("+ " + actual[a])
        else:
            out.append("+ " + actual[a])
    # keep the context around differences
    marks = [k for k, s in enumerate(out) if s[:1] in "-+"]
    if len(out) > limit and marks:
        keep = set()
        for k in marks:
            keep.update(range(max(0, k - 3), min(len(out), k + 4)))
        shown, last = [], -1
        for k in sorted(keep):
            if k != last + 1:
                shown.append("  [...]")
            shown.append(out[k])
            last = k
        if len(shown) > limit:
            shown = shown[:limit] + [f"  [... {len(shown) - limit} more diff lines]"]
        out = shown
    return out


def updated_output(expected, actual, steps):
    """The expected lines rewritten to the actual output, keeping placeholders that match."""
    new = []
    for kind, e, a in steps:
        if kind == "match":
            new.append(expected[e])
        elif kind == "ellipsis":
            new.append(expected[e])
        elif kind in ("extra", "subst"):
            new.append(actual[a])
    return new


# ---------------------------------------------------------------------------------------------
# Running


# what bash itself changes in the environment: not a variable a setup block exported
SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_", "RUN_DOCS_ENV_OUT"}


class Runner:
    def __init__(self, args, env, stdbuf):
        self.args = args
        self.env = env
        self.stdbuf = stdbuf
        self.groups = []  # process group of every command run for the current page

    def run(self, command, cwd, setup=False, env_out=None):
        """Runs one command (or a setup script with bash -e). With env_out, the environment
        at the end of the script is saved there (NUL-separated) for export_vars()."""
        env = self.env
        if env_out:
            # on a line of its own: after a heredoc's terminator, before nothing else
            command = command + '\nenv -0 >"$RUN_DOCS_ENV_OUT"'
            env = dict(self.env, RUN_DOCS_ENV_OUT=env_out)
        if setup:
            argv = ["bash", "-e", "-c", command]
        else:
            argv = ["bash", "-c", command]
            if self.stdbuf:
                argv = [self.stdbuf, "-oL"] + argv
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.groups.append(p.pid)  # its own session: the group of whatever it leaves behind
        try:
            data, _ = p.communicate(timeout=self.args.timeout)
            code = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            data, _ = p.communicate()
            data += f"\n(run_docs: killed after {self.args.timeout} s)\n".encode()
            code = 124
        if code < 0:
            code = 128 - code
        text = data.decode("utf-8", errors="replace")
        out = [ln.rstrip() for ln in text.split("\n")]
        while out and out[-1] == "":
            out.pop()
        return code, out

    def export_vars(self, env_out):
        """Variables a setup block exported (new or changed) join the page's environment,
        as they would stay in the reader's shell."""
        try:
            with open(env_out, "rb") as f:
                data = f.read()
            os.unlink(env_out)
        except OSError:
            return
        for item in data.split(b"\0"):
            name, sep, value = item.decode("utf-8", errors="replace").partition("=")
            if sep and name not in SHELL_VARS and self.env.get(name) != value:
                self.env[name] = value

    def stop_leftovers(self):
        """Stops what the page's commands left running in the background (a server a setup
        block started): SIGTERM to each command's process group, SIGKILL after 5 s."""
        alive = []
        for g in self.groups:
            try:
                os.killpg(g, signal.SIGTERM)
                alive.append(g)
            except (ProcessLookupError, PermissionError):
                pass
        self.groups = []
        deadline = time.monotonic() + 5
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [g for g in alive if group_exists(g)]
        for g in alive:
            try:
                os.killpg(g, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return len(alive)


def group_exists(g):
    try:
        os.killpg(g, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def gpu_count():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for ln in p.stdout.splitlines() if ln.startswith("GPU "))


def unmet_need(tags, args, shared_ok):
    for t in tags:
        if t == "shared" and not shared_ok:
            return "needs ../shared/testdata (absent)"
        if t in ("gpu", "gpu2") and not args.gpu:
            return "needs a GPU (run by tests/gpu/run_gpu*.sh with --gpu)"
        if t == "gpu2" and args.gpus < 2:
            return f"needs two GPUs ({args.gpus} here)"
        if t == "engine" and not args.engine:
            return "needs a running serving engine (--engine URL)"
        if t == "root" and not args.root:
            return "needs root and loop mounts (run with --root where that is allowed)"
        if t == "root" and os.geteuid() != 0:
            return "needs root (--root given, but not running as root)"
    return None


def check_links(page, text, src):
    """Relative links must resolve; README.md must link every page of docs/."""
    errors = []
    in_fence = None
    here = os.path.dirname(page)
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if in_fence is None:
                in_fence = m.group(2)
            elif m.group(2)[0] == in_fence[0] and len(m.group(2)) >= len(in_fence):
                in_fence = None
            continue
        if in_fence is not None or line.startswith("    "):
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            t = target.split("#", 1)[0]
            if t and not os.path.exists(os.path.join(here, t)):
                errors.append(f"{n}: link to '{target}': no such file")
    if os.path.abspath(page) == os.path.join(src, "README.md"):
        docs = os.path.join(src, "docs")
        for name in sorted(os.listdir(docs)) if os.path.isdir(docs) else []:
            if name.endswith(".md") and f"(docs/{name}" not in text:
                errors.append(f"README.md does not link docs/{name}")
        errors += check_scripts(src)
    return errors


def check_scripts(src):
    """The pages tell readers to run these folders' scripts by path: each one that starts
    with '#!' must be executable (bench_gen.sh once was not: exit 126). Tests run by ctest
    through bash or python are not concerned."""
    errors = []
    for top in ("scripts", "tests/bench", "tests/gpu", "testdata"):
        for d, _, files in os.walk(os.path.join(src, top)):
            for name in files:
                if not name.endswith((".sh", ".py")):
                    continue
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    shebang = f.read(2) == b"#!"
                if shebang and not os.access(path, os.X_OK):
                    errors.append(f"{os.path.relpath(path, src)} starts with #! but is not "
                                  "executable (git update-index --chmod=+x)")
    return errors


def run_teardown(rel, blocks, runner, work, args, shared_ok):
    """Runs the page's teardown blocks whose needs are met (after a failure too); returns the
    number that failed."""
    nfail = 0
    for b in blocks:
        if b.kind != "teardown" or unmet_need(b.tags, args, shared_ok):
            continue
        if args.verbose:
            print(f"teardown {rel}:{b.start}")
        code, out = runner.run("\n".join(t for _, t in b.lines), work, setup=True)
        if code != 0:
            nfail += 1
            print(f"FAIL {rel}:{b.start}: teardown block exited {code}:")
            for ln in out[-30:]:
                print("    " + ln)
    return nfail


def run_page(page, runner, args, shared_ok, src):
    """Returns (ran, skipped, failures) for one page; prints its report."""
    rel = os.path.relpath(page, src)
    with open(page, encoding="utf-8") as f:
        text = f.read()
    blocks, errors = parse_page(page, text)
    errors += check_links(page, text, src)
    examples_of = {}
    for b in blocks:
        if b.kind == "console":
            try:
                examples_of[id(b)] = parse_examples(b)
            except PageError as e:
                errors.append(str(e))
    failures = [f"{rel}:{e}" for e in errors]
    for f in failures:
        print(f"FAIL {f}")
    if errors:
        return 0, 0, len(failures)

    n_examples = sum(len(v) for v in examples_of.values())
    if n_examples == 0:
        print(f"{rel}: no examples")
        return 0, 0, 0

    top = tempfile.mkdtemp(prefix="ggufkit-docs-")
    work = os.path.join(top, "work")
    os.mkdir(work)
    os.mkdir(os.path.join(top, "tmp"))
    env_out = os.path.join(top, "setup.env")
    saved_env = runner.env
    runner.env = dict(saved_env, TMPDIR=os.path.join(top, "tmp"))  # this page's, setup exports
    ran = skipped = nfail = 0
    updates = []   # (first, end, new lines) in file line indices
    t0 = time.monotonic()
    try:
        for b in blocks:
            if b.kind in ("other", "teardown"):
                continue
            need = unmet_need(b.tags, args, shared_ok)
            n_here = len(examples_of.get(id(b), [])) if b.kind == "console" else 0
            if (need is None and args.only and b.kind == "console" and
                    args.only not in b.tags and not (args.only == "gpu" and "gpu2" in b.tags)):
                need = f"not tagged '{args.only}' (--only)"
            if need:
                what = "setup block" if b.kind == "setup" else f"{n_here} example(s)"
                print(f"SKIP {rel}:{b.start}: {what}: {need}")
                skipped += n_here
                continue
            if b.kind == "setup":
                script = "\n".join(t for _, t in b.lines)
                if args.verbose:
                    print(f"setup {rel}:{b.start}")
                code, out = runner.run(script, work, setup=True, env_out=env_out)
                if code != 0:
                    nfail += 1
                    print(f"FAIL {rel}:{b.start}: setup block exited {code}:")
                    for ln in out[-30:]:
                        print("    " + ln)
                    print(f"     (every later example of {rel} is skipped)")
                    break
                runner.export_vars(env_out)
                continue
            for ex in examples_of[id(b)]:
                if args.verbose:
                    print(f"$ {ex.command}")
                code, out = runner.run(ex.command, work)
                ran += 1
                cost, steps = align(ex.expected, out)
                if cost == 0 and code == ex.exit_code:
                    continue
                nfail += 1
                print(f"FAIL {rel}:{ex.line}: $ {ex.command}")
                if code != ex.exit_code:
                    print(f"     exit code {code}, the page says {ex.exit_code}")
                if cost:
                    print("     output (- on the page, not printed; + printed, not on the page):")
                    for ln in render_diff(ex.expected, out, steps):
                        print("     " + ln)
                if args.update:
                    new = updated_output(ex.expected, out, steps)
                    if code:
                        new.append(f"[exit {code}]")
                    pad = " " * b.indent
                    updates.append((ex.out_first, ex.out_end,
                                    [(pad + x).rstrip() for x in new]))
    finally:
        nfail += run_teardown(rel, blocks, runner, work, args, shared_ok)
        n = runner.stop_leftovers()
        if n:
            print(f"{rel}: {n} background process group(s) ignored SIGTERM: killed")
        runner.env = saved_env
        if args.keep:
            print(f"{rel}: scratch folder kept: {work}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    if updates:
        lines = text.split("\n")
        for first, end, new in sorted(updates, reverse=True):
            lines[first:end] = new
        with open(page, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"{rel}: updated {len(updates)} example(s); review with git diff")
    print(f"{rel}: {ran} example(s) run, {nfail} failed, {skipped} skipped "
          f"({time.monotonic() - t0:.1f} s)")
    return ran, skipped, nfail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", help="pages (default: README.md and docs/*.md)")
    ap.add_argument("--build", help="build folder (sets GGUFKIT_BIN and GGUFKIT_GEN)")
    ap.add_argument("--update", action="store_true",
                    help="rewrite failing examples with the actual output, keeping placeholders")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folders")
    ap.add_argument("--gpu", action="store_true",
                    help="run the examples tagged gpu/gpu2 (only those, unless --only says)")
    ap.add_argument("--engine", metavar="URL", help="run the blocks tagged engine against URL")
    ap.add_argument("--only", metavar="TAG", help="run only the examples tagged TAG")
    ap.add_argument("--root", action="store_true",
                    help="run the blocks tagged root (they mount file systems: needs root)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per command (120)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command")
    args = ap.parse_args()

    src = os.path.abspath(os.environ.get("GGUFKIT_SRC") or SRC_DEFAULT)
    if args.build:
        build = os.path.abspath(args.build)
        binf, gen = os.path.join(build, "tools"), os.path.join(build, "tools", "gguf-gen")
    else:
        binf, gen = os.environ.get("GGUFKIT_BIN"), os.environ.get("GGUFKIT_GEN")
        if not binf:
            binf = os.path.join(src, "build", "tools")
        if not gen:
            gen = os.path.join(binf, "gguf-gen")
    binf, gen = os.path.abspath(binf), os.path.abspath(gen)
    if not os.path.isdir(binf) or not os.access(gen, os.X_OK):
        print(f"run_docs: error: {binf}, {gen}: not built (give --build DIR)", file=sys.stderr)
        return 2
    args.gpus = gpu_count() if args.gpu else 0
    if args.gpu and not args.only:
        args.only = "gpu"  # on a GPU machine: the GPU examples (the others run in CI)
    shared = os.path.abspath(os.environ.get("GGUFKIT_SHARED")
                             or os.path.join(src, "..", "shared", "testdata"))
    shared_ok = os.path.isdir(shared)

    env = dict(os.environ)
    env.update({
        "PATH": os.pathsep.join([binf, os.path.dirname(gen), env.get("PATH", "/usr/bin:/bin")]),
        "GGUFKIT_SRC": src, "GGUFKIT_SHARED": shared, "GGUFKIT_BIN": binf,
        "GGUFKIT_GEN": gen, "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.pop("LANG", None)
    env.pop("GGUFKIT_ENGINE_URL", None)
    if args.engine:
        env["GGUFKIT_ENGINE_URL"] = args.engine
    runner = Runner(args, env, shutil.which("stdbuf"))

    pages = args.pages
    if not pages:
        docs = os.path.join(src, "docs")
        pages = [os.path.join(src, "README.md")] + sorted(
            os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))
    total_ran = total_skipped = total_fail = 0
    for page in pages:
        if not os.path.isfile(page):
            print(f"run_docs: error: {page}: no such page", file=sys.stderr)
            return 2
        ran, skipped, nfail = run_page(os.path.abspath(page), runner, args, shared_ok, src)
        total_ran += ran
        total_skipped += skipped
        total_fail += nfail
    if total_fail:
        print(f"run_docs: {total_fail} failure(s) (format: docs/conventions.md, "
              "\"Documentation that runs\"; --update rewrites the output)")
        return 1
    if total_ran == 0 and total_skipped > 0:
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
