"""Every bad command line ends in one line naming the problem and the way out, and exit status 2."""
from __future__ import annotations

import json
import os

import pytest

from uprobe_lab import cli, measured_file

HEADER = "arch,kernel,bench,mops\n"
GOOD_ROWS = ("x86_64,6.10,syscall-count,15.9\nx86_64,6.10,uprobe-nop,3.0\nx86_64,6.10,uprobe-ret,1.1\n"
             "x86_64,6.10,uretprobe-nop,1.49\nx86_64,6.10,uretprobe-ret,0.82\n")


def fails_cleanly(capsys, argv, *words) -> str:
    """Run the CLI: exit 2, one 'error:' line on stderr holding ``words``, no traceback, nothing on stdout."""
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and captured.out == ""
    for word in words:
        assert word in err, (word, err)
    return err


@pytest.fixture
def files(tmp_path):
    def write(name, text, mode="w"):
        path = tmp_path / name
        with open(path, mode) as f:
            f.write(text)
        return str(path)
    return write


# --- predict --measured -------------------------------------------------------------------------

@pytest.mark.parametrize("name, body, words", [
    ("empty.csv", "", ("is empty",)),
    ("nonnumeric.csv", HEADER + "x86_64,6.10,uprobe-nop,fast\n", ("line 2", "'fast'", "millions of calls")),
    ("zero.csv", HEADER + "x86_64,6.10,uprobe-nop,0\n", ("line 2", "'0'")),
    ("inf.csv", HEADER + "x86_64,6.10,uprobe-nop,1\nx86_64,6.10,uprobe-ret,inf\n", ("line 3", "'inf'")),
    ("nan.csv", HEADER + "x86_64,6.10,uprobe-nop,nan\n", ("line 2", "'nan'")),
    ("negative.csv", HEADER + GOOD_ROWS + "x86_64,6.10,uprobe-push,-1.5\n", ("line 7", "'-1.5'")),
    ("tiny.csv", HEADER + "x86_64,6.10,uprobe-nop,1e-9\nx86_64,6.10,uprobe-ret,1e-9\n", ("line 2", "at least")),
    ("quoting.csv", HEADER + '"x86_64,6.10,uprobe-nop,1\nx86_64,"6.10\n', ("line 2", "stray quote")),
    ("nocolumns.csv", "a,b\n1,2\n", ("lacks the column(s) arch, kernel, bench, mops",)),
    ("header-only.csv", HEADER, ("no rows",)),
    ("huge.csv", HEADER + "x86_64,6.10,uprobe-nop,1e308\n", ("line 2", "'1e308'", "at most 100000")),
    ("twice.csv", "arch,kernel,bench,mops,mops\nx86_64,6.10,uprobe-nop,3.0,0.5\n",
     ("the column mops appears 2 times (columns 4, 5)", "delete all but")),
])
def test_predict_refuses_bad_measured_files(capsys, files, name, body, words):
    fails_cleanly(capsys, ["predict", "--measured", files(name, body), "--to", "6.11"], "--measured", *words)


@pytest.mark.parametrize("extra, words", [
    ("x86_64,6.10,uprobe-nop,0.001\n", ("uprobe-nop on 6.10 disagree", "0.001 and 3 M/s", "keep the right row")),
    ("x86_64,6.11,uprobe-nop,0.3\n", ("uprobe-nop disagree", "carried to 6.11", "0.3 and 3 M/s")),
])
def test_predict_refuses_rows_of_one_bench_that_disagree(capsys, files, extra, words):
    fails_cleanly(capsys, ["predict", "--measured", files("two.csv", HEADER + GOOD_ROWS + extra), "--to", "6.11"],
                  *words)


def test_predict_refuses_a_binary_file_and_a_directory(capsys, files, tmp_path):
    binary = files("ls.csv", bytes(range(256)) * 4, "wb")
    fails_cleanly(capsys, ["predict", "--measured", binary, "--to", "6.11"], "not text")
    fails_cleanly(capsys, ["predict", "--measured", str(tmp_path), "--to", "6.11"], "is a directory")


def test_predict_refuses_a_named_pipe_without_waiting_for_a_writer(capsys, tmp_path):
    import subprocess
    import sys

    fifo = tmp_path / "rates"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "uprobe_lab", "predict", "--measured", str(fifo), "--to", "6.11"],
                          capture_output=True, text=True, timeout=60)  # the old reader blocked here for ever
    assert done.returncode == 2 and done.stderr.startswith(f"error: --measured {fifo} is not a regular file (a FIFO); "
                                                           "save the measurements to a file first")
    fails_cleanly(capsys, ["predict", "--measured", "/dev/null", "--to", "6.11"], "is not a regular file")


def test_predict_parses_the_file_it_judged_regular(files, tmp_path, monkeypatch):
    """The file is read once, through the open that judged it a regular file: a file renamed over the path after
    that open is not what gets parsed."""
    measured = files("good.csv", HEADER + GOOD_ROWS)
    other = files("other.csv", HEADER + "x86_64,6.10,uprobe-nop,9.0\n")
    opened = measured_file.open_regular

    def then_swapped(path):
        f = opened(path)
        os.replace(other, measured)
        return f
    monkeypatch.setattr(measured_file, "open_regular", then_swapped)
    table = measured_file.read_measured(measured)
    assert list(table["bench"]) == ["syscall-count", "uprobe-nop", "uprobe-ret", "uretprobe-nop", "uretprobe-ret"]
    assert table.set_index("bench").loc["uprobe-nop", "mops"] == 3.0


def test_predict_reads_a_json_file_once(files, monkeypatch):
    """The JSON form too is parsed from the bytes the one open read."""
    rows = [{"arch": "x86_64", "kernel": "6.10", "bench": "uprobe-nop", "mops": 3.0, "mode": "native"}]
    measured = files("mine.json", "\ufeff" + json.dumps(rows), "w")
    opened = measured_file.open_regular

    def then_swapped(path):
        f = opened(path)
        os.unlink(path)
        return f
    monkeypatch.setattr(measured_file, "open_regular", then_swapped)
    assert list(measured_file.read_measured(measured)["bench"]) == ["uprobe-nop"]


def test_predict_out_must_be_a_writable_file(capsys, files, tmp_path):
    measured = files("good.csv", HEADER + GOOD_ROWS)
    fails_cleanly(capsys, ["predict", "--measured", measured, "--to", "6.11", "--out", str(tmp_path)],
                  "is a directory", "give a file name")
    fails_cleanly(capsys, ["predict", "--measured", measured, "--to", "6.11", "--out", "/proc/no/such.csv"],
                  "/proc/no", "not an existing directory")
    # /proc accepts no new files, not even from root
    fails_cleanly(capsys, ["predict", "--measured", measured, "--to", "6.11", "--out", "/proc/predicted.csv"],
                  "--out /proc/predicted.csv", "give a path you can write")


@pytest.mark.slow
def test_predict_on_a_million_rows_stays_small(tmp_path):
    """A million repeats of the five good rows: the same figures as the rows once, under 500 MB peak RSS
    (the fit once built an n x n matrix: 3.2 GB for 20k rows)."""
    import subprocess
    import sys

    once, many = tmp_path / "once.csv", tmp_path / "many.csv"
    once.write_text(HEADER + GOOD_ROWS)
    many.write_text(HEADER + GOOD_ROWS * 200_000)
    # VmHWM is the peak of this process's own memory; ru_maxrss would keep the peak of the pytest worker
    # that forked it, since Linux carries it across execve
    script = ("import sys; from uprobe_lab import cli; rc = cli.main(sys.argv[1:]); "
              "hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM:')); "
              "print('maxrss', hwm.split()[1], file=sys.stderr); sys.exit(rc)")
    figures = {}
    for path in (once, many):
        out = subprocess.run([sys.executable, "-c", script, "predict", "--measured", str(path), "--to", "6.11"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        figures[path.name] = [float(v) for line in out.stdout.splitlines()[1:] for v in line.split(",")[1:]]
        rss_kb = int(out.stderr.split("maxrss ")[1].split()[0])
    assert rss_kb < 500 * 1024
    assert len(figures["many.csv"]) == 5 * 3
    assert figures["many.csv"] == pytest.approx(figures["once.csv"], rel=1e-4)


def test_predict_still_writes_good_input(capsys, files, tmp_path):
    out = tmp_path / "pred.csv"
    assert cli.main(["predict", "--measured", files("good.csv", HEADER + GOOD_ROWS), "--to", "6.11",
                     "--out", str(out)]) == 0
    assert out.read_text().startswith("bench,predicted_mops,low_80,high_80\nsyscall-count,")


@pytest.mark.parametrize("release", ["6.8.0-45-generic", "5.15", "4.18.0-553.el8_10.x86_64"])
def test_predict_takes_a_release_older_than_every_modelled_version(capsys, files, release):
    """--to prices a release by the row that answers for it, as bench --kernel does: the oldest, 6.10."""
    measured = files("good.csv", HEADER + GOOD_ROWS)
    assert cli.main(["predict", "--measured", measured, "--to", "6.10"]) == 0
    on_6_10 = capsys.readouterr().out
    assert cli.main(["predict", "--measured", measured, "--to", release]) == 0
    captured = capsys.readouterr()
    assert captured.out == on_6_10
    assert f"kernel {release}: older than every modelled version; the lab's 6.10 row answers for it" in captured.err
    err = fails_cleanly(capsys, ["predict", "--measured", measured, "--to", "2.6.32"], "has no uprobes", "e.g. 3.5")
    assert "--kernel" not in err  # predict's flag is --to


def test_predict_to_a_release_before_uretprobes_says_what_predict_can_do(capsys, files):
    """3.5-3.9 have uprobes and no uretprobes: the refusal is the only line, and its way out is one predict can take
    (the table of figures has no row for a bench the release cannot run)."""
    measured = files("good.csv", HEADER + GOOD_ROWS)
    err = fails_cleanly(capsys, ["predict", "--measured", measured, "--to", "3.5"],
                        "kernel 3.5 has no uretprobes (they came in Linux 3.10)",
                        "rows of uretprobe-nop, uretprobe-ret cannot be carried",
                        "drop them from the measured table, or predict a release from 3.10 on")
    assert "uprobe bench" not in err
    uprobes_only = files("uprobes.csv", HEADER + "".join(GOOD_ROWS.splitlines(True)[:3]))
    assert cli.main(["predict", "--measured", uprobes_only, "--to", "3.5"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("bench,predicted_mops,low_80,high_80\nsyscall-count,")
    assert "kernel 3.5: older than every modelled version" in captured.err


@pytest.mark.parametrize("release", ["3.5", "4.9"])
def test_predict_refuses_a_release_before_arm64s_uprobes_first(capsys, files, release):
    """arm64 measurements carried to a release before arm64's uprobes (4.10): the arm64 refusal, with no line about
    the row that would have answered."""
    measured = files("arm64.csv", HEADER + "arm64,6.18,syscall-count,10.0\narm64,6.18,uprobe-nop,2.0\n")
    fails_cleanly(capsys, ["predict", "--measured", measured, "--to", release],
                  f"kernel {release} has no uprobes on arm64", "e.g. 4.10")


@pytest.mark.parametrize("label", ["xol-stp", "simulated-stp", "simulated-stp-uaccess"])
def test_predict_takes_the_arm64_stp_labels_its_help_lists(capsys, files, label):
    measured = files("arm64.csv", HEADER + "arm64,6.18,syscall-count,10.0\narm64,6.18,uprobe-nop,2.0\n"
                     "arm64,6.18,uprobe-push,1.5\narm64,6.18,uretprobe-nop,1.0\n")
    assert cli.main(["predict", "--measured", measured, "--to", label]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("bench,predicted_mops,low_80,high_80\nsyscall-count,")
    assert "not a kernel release" not in captured.err


# --- reproduce --out ----------------------------------------------------------------------------

def test_reproduce_out_must_be_a_directory_it_can_make(capsys, files, tmp_path, monkeypatch):
    a_file = files("a-file", "x")
    fails_cleanly(capsys, ["reproduce", "--out", a_file], "is a file, not a directory")
    fails_cleanly(capsys, ["reproduce", "--out", os.path.join(a_file, "charts")], "cannot make the directory",
                  "Not a directory")
    fails_cleanly(capsys, ["reproduce", "--out", "/proc/charts"], "cannot make the directory")
    monkeypatch.chdir(tmp_path)  # where an empty --out once wrote the charts
    fails_cleanly(capsys, ["reproduce", "--out", ""], "--out is empty", "e.g. --out charts")


def test_predict_out_may_not_be_empty(capsys, files):
    fails_cleanly(capsys, ["predict", "--measured", files("good.csv", HEADER + GOOD_ROWS), "--to", "6.11",
                           "--out", ""], "--out is empty", "drop --out")


# --- bench --------------------------------------------------------------------------------------

def test_bench_stp_is_an_arm64_option(capsys):
    fails_cleanly(capsys, ["bench", "--stp", "simulate", "uprobe-nop", "--iterations", "10"],
                  "--stp is an arm64 setting", "--arch arm64")
    fails_cleanly(capsys, ["bench", "--mode", "model", "--stp", "xol", "uprobe-push"], "--arch arm64")


@pytest.mark.parametrize("iterations", ["0", "-5", str(2 ** 64), str(10 ** 23)])
def test_bench_iterations_must_fit_the_loop_register(capsys, iterations):
    fails_cleanly(capsys, ["bench", "uprobe-nop", "--iterations", iterations], "2**64-1", iterations)
    fails_cleanly(capsys, ["bench", "--mode", "native", "uprobe-nop", "--iterations", iterations], "2**64-1")


@pytest.mark.parametrize("mode, words", [("native", ["this machine's own CPU"]), ("emulated", ["counts events"])])
def test_bench_cpu_is_a_model_setting(capsys, mode, words):
    fails_cleanly(capsys, ["bench", "--mode", mode, "--cpu", "amd", "uprobe-nop"],
                  "--cpu is a --mode model setting", f"--mode {mode}", "add --mode model", *words)


def test_verify_sample_is_not_negative_and_has_a_most(capsys):
    fails_cleanly(capsys, ["verify", "--sample", "-1"], "--sample -1", "0 to 100000 on x86_64")
    fails_cleanly(capsys, ["verify", "--arch", "arm64", "--sample", "-1"], "--sample -1", "0 to 2000 on arm64")
    fails_cleanly(capsys, ["verify", "--sample", "99999999999999999999"], "--sample 99999999999999999999",
                  "0 to 100000 on x86_64", "another --seed")
    fails_cleanly(capsys, ["verify", "--arch", "arm64", "--sample", "2001"], "0 to 2000 on arm64")


def test_verify_arm64_runs_the_sample_it_is_given(capsys, monkeypatch):
    """--sample and --seed reach the arm64 referee (its random words come on top of its fixed case list); unset,
    it runs its sweep alone while x86 keeps 3000. x86-only settings are refused by name."""
    import uprobe_lab.verify as verify_mod

    class Report:
        def format(self):
            return "ok"

    seen = []
    monkeypatch.setattr(verify_mod, "verify", lambda arch, progress=None, **options: seen.append((arch, options)) or Report())
    assert cli.main(["verify", "--arch", "arm64", "--sample", "300", "--seed", "5"]) == 0
    assert cli.main(["verify", "--arch", "arm64"]) == 0
    assert [(o["sample"], o["seed"]) for _, o in seen] == [(300, 5), (0, 1)]
    assert cli.main(["verify"]) == 0 and seen[-1][1]["sample"] == 3000
    capsys.readouterr()
    fails_cleanly(capsys, ["verify", "--arch", "arm64", "--classes", "VEX", "--no-sweeps"],
                  "--classes, --no-sweeps: x86 settings", "drop them")


def test_analyze_names_bytes_cut_short_and_bytes_that_are_no_instruction(capsys):
    """00 is the first byte of add %al,(%rax): the kernel would read the rest from the page, so the
    answer needs them. 0f04 decodes as nothing however it goes on: the kernel refuses it (-ENOEXEC)."""
    fails_cleanly(capsys, ["analyze", "00"], "00 is only the start of an instruction", "add byte ptr [rax], al",
                  "e.g. 0000")
    fails_cleanly(capsys, ["analyze", "0f1f"], "nop dword ptr [rax]", "give all of its bytes")
    assert cli.main(["analyze", "0f04"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0f04 (no instruction): reject\n") and "None" not in out


def test_bench_native_refuses_a_foreign_arch(capsys):
    from uprobe_lab.native.arch import host_arch

    other = "arm64" if host_arch() == "x86_64" else "x86_64"
    fails_cleanly(capsys, ["bench", "--mode", "native", "--arch", other, "uprobe-nop"],
                  f"--arch {other}", f"which is {host_arch()}", "--mode emulated")


def test_an_os_error_mid_run_is_one_line(capsys, monkeypatch):
    def full_disk(args):
        raise OSError(28, "No space left on device", "/data/pred.csv")

    monkeypatch.setattr(cli, "cmd_analyze", full_disk)  # build_parser() looks it up on each main()
    fails_cleanly(capsys, ["analyze", "90"], "/data/pred.csv: No space left on device")


@pytest.mark.parametrize("mode, expected", [("native", "native"), ("emulated", "emulated")])
def test_bench_iterations_default_per_mode(monkeypatch, mode, expected):
    """Unset, --iterations is the native bench's own default in native mode (what it documents) and the
    emulator's in emulated mode."""
    import uprobe_lab.native as native
    from uprobe_lab import bench as bench_mod

    seen = {}

    def fake(names=None, arch=None, kernel=None, iterations=None, **kw):
        seen["iterations"] = iterations
        return []

    monkeypatch.setattr(native, "run_native_benches", fake)
    monkeypatch.setattr(bench_mod, "run_benches", fake)
    assert cli.main(["bench", "--mode", mode, "uprobe-nop", "--json"]) == 0
    assert seen["iterations"] == {"native": native.DEFAULT_ITERATIONS, "emulated": bench_mod.DEFAULT_ITERATIONS}[expected]


def test_predict_reads_the_native_benchs_json(tmp_path, capsys):
    """bench --mode native --json's rows (here the bundled recording's, a 6.18 release) go straight into
    predict, as does the recording itself ({"benches": [...]}); 6.18 -> 6.18 keeps every figure."""
    from uprobe_lab.native.example import load_example
    rows = load_example()["benches"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(rows))
    table = measured_file.read_measured(str(path))
    nop = table.set_index("bench").loc["uprobe-nop"]
    want = next(r for r in rows if r["bench"] == "uprobe-nop")
    # the standard error of the mean over the row's timed intervals, as the calibration takes it
    sem = want["stddev"] / want["repeats"] ** 0.5 / want["mops"]
    assert nop["kernel"] == want["kernel"] and float(nop["rel_err"]) == pytest.approx(sem)
    assert cli.main(["predict", "--measured", str(path), "--to", "6.18"]) == 0
    out = capsys.readouterr().out.splitlines()
    got = dict(line.split(",")[:2] for line in out[1:])
    assert float(got["uprobe-nop"]) == pytest.approx(want["mops"], rel=1e-4)
    whole = tmp_path / "recording.json"
    whole.write_text(json.dumps(load_example()))
    assert measured_file.read_measured(str(whole)).equals(table)


def test_predict_reads_a_many_cpu_row_as_its_one_cpu_run(tmp_path, capsys):
    """bench -p 2 --json: a row's mops is two producers' total; predict takes the row's one_cpu run instead
    (3.1 M/s alone, not 5.8 M/s for the two), and refuses a many-CPU row that has none."""
    row = {"bench": "uprobe-nop", "arch": "x86_64", "mode": "native", "kernel": "6.18.0", "cpus": 2,
           "repeats": 5, "mops": 5.8, "mops_per_cpu": 2.9, "stddev": 0.4,
           "one_cpu": {"cpu": 0, "mops_per_cpu": 3.1, "stddev": 0.031}}
    path = tmp_path / "p2.json"
    path.write_text(json.dumps([row]))
    table = measured_file.read_measured(str(path))
    assert float(table["mops"].iloc[0]) == 3.1
    assert float(table["rel_err"].iloc[0]) == pytest.approx(0.031 / 3.1 / 5 ** 0.5)
    path.write_text(json.dumps([{k: v for k, v in row.items() if k != "one_cpu"}]))
    fails_cleanly(capsys, ["predict", "--measured", str(path), "--to", "6.11"], "ran on 2 CPUs", "without -p")


@pytest.mark.parametrize("text, words", [
    ('[{"bench": "uprobe-nop", "mode": "emulated", "hits_per_s": 1e6}]', ["emulated rows", "only native rows"]),
    ('[{"bench"', ["not well-formed JSON"]),
    ('[1, 2]', ["a JSON list of bench rows"]),
    ('{"rows": []}', ["a JSON list of bench rows"]),
    ('[{"bench": "uprobe-nop", "mode": "native", "arch": "x86_64", "kernel": "6.18", "mops": 1.5, "stddev": "x"}]',
     ["is not a number"]),
    ("[" * 100_000 + "]" * 100_000, ["nests too deep"]),
])
def test_predict_refuses_json_that_is_not_native_rows(tmp_path, capsys, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    fails_cleanly(capsys, ["predict", "--measured", str(path), "--to", "6.18"], str(path), *words)


def test_an_emulated_bench_refuses_iterations_it_would_not_finish(capsys):
    fails_cleanly(capsys, ["bench", "uprobe-nop", "--iterations", str(2 ** 64 - 1)],
                  "from 1 to 1_000_000 on the emulator", "--mode native")


# --- --kernel: any release -----------------------------------------------------------------------

@pytest.mark.parametrize("release, row", [("7.4.1", "7.3"), ("6.19", "6.18"), ("6.12.118+deb12-amd64", "6.11"),
                                          ("6.17.8", "6.16"), ("6.8.0-45-generic", "6.10"),
                                          ("7.2.13+deb14-amd64", "7.3"), ("7.2.5", "6.18"),
                                          ("5.15.0-91-generic", "6.10"),
                                          (os.uname().release, None)])
def test_kernel_takes_any_release_and_says_which_row_answers(capsys, release, row):
    """Rows by the release that brought each: 6.10, 6.11, 6.16, 6.18, 7.3 (a release takes the newest not newer, or
    the row its stable backports made it hit like, and one older than all of them the oldest)."""
    assert cli.main(["bench", "uprobe-nop", "--kernel", release, "--iterations", "10", "--json"]) == 0
    captured = capsys.readouterr()
    got = json.loads(captured.out)[0]["kernel"]
    if row is not None:
        assert got == row and f"the lab's {row} row answers for it" in captured.err
    assert f"kernel {release}:" in captured.err and got in ("6.10", "6.11", "6.16", "6.18", "7.3")


def test_a_modelled_version_is_taken_without_a_word(capsys):
    assert cli.main(["analyze", "90", "--kernel", "6.16", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_kernel_refuses_what_is_no_release_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "uprobe-nop", "--kernel", "banana"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "'banana' is not a kernel release" in err and "6.10, 6.11, 6.16, 6.18, 7.3" in err


# --- predict --measured: JSON as bench --json writes it, and what it cannot be ---------------------

NATIVE_ROW = {"bench": "uprobe-nop", "arch": "x86_64", "mode": "native", "kernel": "6.18.5", "iterations": 100_000,
              "repeats": 5, "hits": 500_000, "mops": 3.1, "stddev": 0.1}


def test_json_after_a_byte_order_mark_is_read_as_json(tmp_path):
    """Windows editors start a UTF-8 file with EF BB BF; the rows after it are the same rows."""
    plain, marked = tmp_path / "plain.json", tmp_path / "marked.json"
    plain.write_text(json.dumps([NATIVE_ROW]))
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert measured_file.read_measured(str(marked)).equals(measured_file.read_measured(str(plain)))


@pytest.mark.parametrize("rows, words", [
    ([{**NATIVE_ROW, "bench": "uprobe-nop10", "refused": "refused by this kernel (6.18) at attach"}],
     ["holds only rows the kernel refused at attach (1)", "nothing was measured"]),
    ([], ["holds no bench rows"]),
    ([{k: v for k, v in NATIVE_ROW.items() if k != "mops"}], ["row 1 ('uprobe-nop') has no mops;"]),
    ([{k: v for k, v in NATIVE_ROW.items() if k not in ("arch", "kernel")}], ["has no arch and no kernel;"]),
    ([{**NATIVE_ROW, "repeats": 10 ** 400}], ["row 1 ('uprobe-nop') has repeats 1000", "(401 characters)",
                                              "is not a number"]),
    ([{**NATIVE_ROW, "repeats": -5}], ["has repeats -5: the number of timed intervals, 1 or more"]),
    ([{**NATIVE_ROW, "stddev": [1]}], ["has stddev [1], which is not a number"]),
    ([{**NATIVE_ROW, "mode": ["native"]}], ["holds ['native'] rows; only native rows"]),
])
def test_predict_names_what_a_json_row_lacks(tmp_path, capsys, rows, words):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    err = fails_cleanly(capsys, ["predict", "--measured", str(path), "--to", "6.18"], str(path), *words)
    assert "stray quote" not in err and "header but no rows" not in err


def test_predict_refuses_a_number_too_long_to_read(tmp_path, capsys):
    path = tmp_path / "rows.json"
    path.write_text('[{"bench": "uprobe-nop", "mops": %s}]' % ("1" * 5000))  # past Python's 4300 digits
    fails_cleanly(capsys, ["predict", "--measured", str(path), "--to", "6.18"], "holds a number too long to read")


# --- bench -p on the emulator --------------------------------------------------------------------

def test_too_many_emulated_calls_say_what_to_lower(capsys):
    """-p 51 at the default 20_000 calls is 1_020_000 calls, past the emulator's 1_000_000: the most per CPU is
    1_000_000 // 51 = 19_607 (by hand). Native mode is named only where the machine has 51 CPUs."""
    err = fails_cleanly(capsys, ["bench", "uprobe-nop", "-p", "51"],
                        "give at most 19_607 iterations (--iterations 19607)")
    assert ("--mode native" in err) == (len(os.sched_getaffinity(0)) >= 51)
    fails_cleanly(capsys, ["bench", "uprobe-nop", "-p", "257"], "-p) is an int from 1 to 256")


@pytest.mark.parametrize("release, row, rule", [
    # worked out from kernel.RULES by hand: 9.9 is past every rule, whose newest for x86 is 7.3's optimize_nop10;
    # 6.13 hits as 6.11 (the newest modelled version not newer) and has the 6.13 core rules (xol_no_slot_count...)
    ("9.9", "7.3", "from 7.3"), ("99999999999999999999.1", "7.3", "from 7.3"), ("6.13", "6.11", "from 6.13"),
    # 7.2.13 has the nop10 series by the 7.2.y line's backport (7.2.6), not from its release
    ("7.2.13", "7.3", "optimize_nop10, a backport of 7.3's to 7.2.6"),
])
def test_p_with_a_release_says_which_rules_answer(capsys, release, row, rule):
    assert cli.main(["bench", "uprobe-nop", "-p", "2", "--kernel", release, "--iterations", "10"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"kernel {release}: the emulator runs the lab's rules of every release up to it: a hit "
                          f"on one CPU is the {row} row's") and rule in err


def test_a_p_row_is_named_by_the_release_it_ran(capsys):
    """A release with a sublevel runs its backports, so its row carries the sublevel; one without is mainline."""
    for release, name in (("7.2.13", "7.2.13"), ("7.2", "7.2"), ("6.8.0-45-generic", "6.8")):
        assert cli.main(["bench", "uprobe-nop10", "-p", "2", "--kernel", release, "--iterations", "10", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["kernel"] == name


def test_predict_says_which_row_prices_a_release(capsys, files, tmp_path):
    measured = files("m.csv", HEADER + GOOD_ROWS)
    assert cli.main(["predict", "--measured", measured, "--to", "7.2", "--out", str(tmp_path / "p.csv")]) == 0
    err = capsys.readouterr().err
    assert "kernel 7.2: the lab's 6.18 row answers for it" in err and "--kernel 7.2.6" in err


def test_p_with_a_modelled_version_says_nothing(capsys):
    assert cli.main(["bench", "uprobe-nop", "-p", "2", "--kernel", "6.18", "--iterations", "10"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_predict_on_a_million_rows_over_125k_releases_is_quick(tmp_path):
    """125_000 releases of the 6.11..6.15 lines, eight benches each: 6.11 answers for all of them, so carried to
    6.11 every bench keeps its rate (the same events: a speedup of exactly 1). It once took 164 s of CPU."""
    import resource
    import subprocess
    import sys

    rates = {"usermode-count": 500.0, "syscall-count": 20.0, "uprobe-nop": 3.0, "uretprobe-nop": 1.6,
             "uprobe-push": 2.9, "uretprobe-push": 1.5, "uprobe-ret": 1.2, "uretprobe-ret": 0.9}
    path = tmp_path / "many.csv"
    with open(path, "w") as f:
        f.write(HEADER)
        for i in range(125_000):
            f.writelines(f"x86_64,6.{11 + i % 5}.{i // 5},{bench},{mops}\n" for bench, mops in rates.items())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "uprobe_lab", "predict", "--measured", str(path), "--to", "6.11"],
                         capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert out.returncode == 0, out.stderr
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu_s < 20, cpu_s  # CPU, not wall time: a busy machine does not fail it
    got = {line.split(",")[0]: float(line.split(",")[1]) for line in out.stdout.splitlines()[1:]}
    assert got == pytest.approx(rates, rel=1e-4)


@pytest.mark.parametrize("lines", ["9.9", "banana", ",", "6.1,9.9"])
def test_verify_kernels_names_the_lines_before_any_boot(capsys, monkeypatch, lines):
    import uprobe_lab.verify.x86_kernels as x86_kernels

    monkeypatch.setattr(x86_kernels, "referee", lambda *a, **k: pytest.fail("booted before checking the lines"))
    fails_cleanly(capsys, ["verify", "--kernels", lines], "no Debian kernel line", "the lines are 6.1")


# --- SIGTERM and SIGHUP: the cleanup Ctrl-C runs ---------------------------------------------------

STUCK_COMMAND = """
import os, signal, sys
from uprobe_lab import cli

def stuck(args):
    try:
        os.kill(os.getpid(), signal.SIG{name})
        signal.pause()
    finally:
        print("cleaned up", flush=True)

cli.cmd_analyze = stuck
sys.exit(cli.main(["analyze", "90"]))
"""


@pytest.mark.parametrize("name", ["TERM", "HUP"])
def test_sigterm_and_sighup_end_a_command_through_its_cleanup(name):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", STUCK_COMMAND.format(name=name)], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "cleaned up\n", "interrupted\n")


NOHUP_COMMAND = """
import os, signal, sys
from uprobe_lab import cli

def hung_up(args):
    os.kill(os.getpid(), signal.SIGHUP)  # the terminal closed: nohup's run goes on
    print("went on", flush=True)
    return 0

cli.cmd_analyze = hung_up
sys.exit(cli.main(["analyze", "90"]))
"""


def test_a_command_started_under_nohup_outlives_its_terminal():
    import signal
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NOHUP_COMMAND], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert (done.returncode, done.stdout, done.stderr) == (0, "went on\n", "")


# --- --kernel outside the modelled releases --------------------------------------------------------

@pytest.mark.parametrize("argv", [["analyze", "90"], ["bench", "uprobe-nop", "--iterations", "10"],
                                  ["bench", "uprobe-nop", "-p", "2", "--iterations", "10"]])
@pytest.mark.parametrize("release", ["9.9", "7.4.1"])
def test_a_release_past_the_newest_is_said_to_be_modelled_as_the_newest(capsys, argv, release):
    assert cli.main([*argv, "--kernel", release]) == 0
    assert (f"kernel {release}: newer than every release the lab models, so it is modelled as 7.3, the newest"
            in capsys.readouterr().err)


def test_analyze_says_which_row_answers_for_a_release_older_than_every_modelled_one(capsys):
    assert cli.main(["analyze", "90", "--kernel", "5.4.302"]) == 0
    assert capsys.readouterr().err.startswith("kernel 5.4.302: older than every modelled version; the lab's 6.10 row")


@pytest.mark.parametrize("argv, words", [
    (["analyze", "90", "--kernel", "2.6"], "kernel 2.6 has no uprobes at all (they came in Linux 3.5 on x86_64, "
                                           "4.10 on arm64)"),
    (["analyze", "--arch", "arm64", "d503201f", "--kernel", "4.9"], "kernel 4.9 has no uprobes on arm64"),
    (["bench", "--arch", "arm64", "uprobe-nop", "--kernel", "4.4"], "kernel 4.4 has no uprobes on arm64"),
    (["bench", "uprobe-nop", "-p", "2", "--kernel", "3.4"], "kernel 3.4 has no uprobes at all"),
    (["verify", "--kernel", "3.0"], "kernel 3.0 has no uprobes at all"),
])
def test_a_release_before_uprobes_is_refused(capsys, argv, words):
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # refused by the option's type, as a release that is none is
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and words in err and "give a newer release" in err and "Traceback" not in err


def test_the_library_refuses_a_release_before_uprobes_too():
    from uprobe_lab.errors import LabError
    from uprobe_lab.kernel import kernel_for_release, release_rules

    for ask in (kernel_for_release, release_rules):
        with pytest.raises(LabError, match="kernel 2.6.32 has no uprobes at all"):
            ask("2.6.32")
    assert kernel_for_release("3.5").name == "3.5"


def test_a_bad_arm64_word_is_the_only_line(capsys):
    fails_cleanly(capsys, ["analyze", "--arch", "arm64", "zzzz", "--kernel", "6.18"],
                  "'zzzz' is not an arm64 instruction word")


@pytest.mark.parametrize("argv, flags", [(["--record", "run.json"], "--record"),
                                         (["--kernel-deb", "k.deb", "--record", "r.json"], "--record, --kernel-deb"),
                                         (["--kernel-package", "linux-image-6.12.117+deb13-arm64"], "--kernel-package")])
def test_verify_on_x86_refuses_the_arm64_referees_settings(capsys, monkeypatch, tmp_path, argv, flags):
    import uprobe_lab.verify as verify_mod

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(verify_mod, "verify", lambda *a, **k: pytest.fail("ran, leaving the setting unused"))
    fails_cleanly(capsys, ["verify", *argv], f"{flags}: settings of the arm64 referee (--arch arm64",
                  "drop them, or add --arch arm64")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, flags", [
    (["--sample", "5", "--probe", "bpf", "--no-sweeps", "--classes", "nops", "--kernel", "6.10", "--kernel-deb", "x"],
     "--sample, --classes, --no-sweeps, --kernel, --probe, --kernel-deb"),
    (["--arch", "arm64", "--seed", "0"], "--arch, --seed"),
    (["--kernel-package", "linux-image-6.18"], "--kernel-package")])
def test_verify_kernels_refuses_the_instruction_referees_settings(capsys, monkeypatch, argv, flags):
    from uprobe_lab.verify import x86_kernels

    monkeypatch.setattr(x86_kernels, "referee", lambda *a, **k: pytest.fail("booted, leaving the setting unused"))
    fails_cleanly(capsys, ["verify", "--kernels", "6.18", *argv], f"{flags}: settings of the instruction referees",
                  "drop them")


@pytest.mark.parametrize("release", ["6.10", "6.1"])  # 6.1: no note on which row answers before the refusal
def test_verify_arm64_refuses_kernel_by_name(capsys, monkeypatch, release):
    import uprobe_lab.verify as verify_mod

    monkeypatch.setattr(verify_mod, "verify", lambda *a, **k: pytest.fail("ran, leaving --kernel unused"))
    fails_cleanly(capsys, ["verify", "--arch", "arm64", "--kernel", release], "--kernel: x86 settings",
                  "the kernel it boots (--kernel-package or --kernel-deb): drop them")


@pytest.mark.parametrize("cpus", [[], ["-p", "2"]])
def test_an_unknown_native_bench_is_named_before_any_cpu_is_pinned_or_held(capsys, monkeypatch, cpus):
    import contextlib
    import warnings

    from native_support import require_native
    from uprobe_lab.native import bench as native_bench
    from uprobe_lab.native import many_cpus

    require_native()

    @contextlib.contextmanager
    def busy(*args):
        warnings.warn("every CPU this process may use runs another lab bench")
        yield

    monkeypatch.setattr(native_bench, "pinned_to_one_cpu", busy)
    monkeypatch.setattr(many_cpus, "held_cpu", busy)
    fails_cleanly(capsys, ["bench", "--mode", "native", *cpus, "nosuch"], "unknown native bench(es) 'nosuch'",
                  "known: usermode-count")


def test_a_refused_bpf_consumer_offers_the_command_line_s_way_out(capsys, monkeypatch):
    """bench --mode native where bpf(2) refuses the consumer: the way out is --mode emulated, not a notebook function."""
    import uprobe_lab.native as native_mod
    from native_support import refuse_bpf

    monkeypatch.setattr(native_mod, "run_native_benches", refuse_bpf)
    assert cli.main(["bench", "--mode", "native", "uprobe-nop"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("native benchmarks are not possible here: bpf(2) refused the BPF consumer"), err
    assert err.endswith("run as root on such a kernel, or the emulated mode (--mode emulated) runs everywhere\n"), err


def test_a_native_refusal_names_the_emulated_mode_as_the_command_line_spells_it(capsys, monkeypatch):
    """bench: --mode emulated, not the Python keyword; verify has no emulated mode, so none is offered."""
    import uprobe_lab.native as native_mod
    import uprobe_lab.verify as verify_mod
    from uprobe_lab.native import errors

    def refuse(*a, **k):
        raise errors.no_uprobe_pmu("/sys/bus/event_source/devices/uprobe/type")

    monkeypatch.setattr(native_mod, "run_native_benches", refuse)
    assert cli.main(["bench", "--mode", "native", "uprobe-nop"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("use such a kernel, or the emulated mode (--mode emulated) runs everywhere\n"), err
    assert "mode='emulated'" not in err
    monkeypatch.setattr(verify_mod, "verify", refuse)
    assert cli.main(["verify"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("Linux >= 4.17; use such a kernel\n") and "emulated" not in err, err
