"""No command deletes or overwrites a file it did not write, whatever --out it is given (uprobe_lab/outputs.py)."""
import os
import signal
from pathlib import Path

import pytest

from uprobe_lab import cli, outputs, site
from uprobe_lab.errors import LabError

REPO = Path(__file__).resolve().parents[1]


def tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def users_dir(tmp_path):
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "thesis.tex").write_text("three years of work")
    (d / "sub" / "data.csv").write_text("a,b\n1,2\n")
    return d


def test_the_site_refuses_a_directory_holding_a_users_files_and_changes_nothing(users_dir, capsys):
    before = tree(users_dir)
    assert site.main(["--out", str(users_dir), "--no-execute"]) == 1
    err = capsys.readouterr().err
    assert "holds files the lab did not write" in err and "thesis.tex" in err and "nothing was changed" in err
    assert tree(users_dir) == before


@pytest.mark.parametrize("place", ["", ".", "~", "/", str(REPO), str(REPO.parent), "notebooks"])
def test_the_site_refuses_the_checkout_home_root_and_the_working_directory(place, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    repo_before = sorted(p.name for p in REPO.iterdir())
    notebooks_before = tree(REPO / "notebooks")
    assert site.main(["--out", place, "--no-execute"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and "Traceback" not in err
    assert sorted(p.name for p in REPO.iterdir()) == repo_before
    assert tree(REPO / "notebooks") == notebooks_before


def test_a_second_stage_replaces_only_the_labs_own_files(tmp_path):
    book = tmp_path / "book"
    site.stage(book, execute=False)
    first = tree(book)
    assert outputs.MANIFEST in first and "intro.md" in first
    site.stage(book, execute=False)  # its own files: replaced without a word
    assert tree(book) == first
    (book / "intro.md").write_text("my edit")  # now the user's: the next build must not undo it
    with pytest.raises(LabError, match="intro.md"):
        site.stage(book, execute=False)
    assert (book / "intro.md").read_text() == "my edit"


def test_a_users_file_added_to_a_built_site_stops_the_next_build(tmp_path):
    book = tmp_path / "book"
    site.stage(book, execute=False)
    (book / "notebooks" / "notes.md").write_text("mine")
    with pytest.raises(LabError, match="notebooks/notes.md"):
        site.stage(book, execute=False)
    assert (book / "notebooks" / "notes.md").read_text() == "mine" and (book / "intro.md").exists()


@pytest.mark.parametrize("bad, words", [
    ("/proc/x", "cannot make the directory"),
    ("/dev/null/x", "cannot make the directory"),
    ("a\0b", "not a usable path"),
])
def test_the_site_names_a_place_it_cannot_write(bad, words, capsys):
    assert site.main(["--out", bad, "--no-execute"]) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_site_refuses_a_file_as_its_directory(tmp_path, capsys):
    f = tmp_path / "report.pdf"
    f.write_bytes(b"%PDF")
    assert site.main(["--out", str(f), "--no-execute"]) == 1
    assert "is a file, not a directory" in capsys.readouterr().err and f.read_bytes() == b"%PDF"


def test_reproduce_refuses_before_its_run_when_a_users_file_has_one_of_its_names(users_dir, capsys):
    (users_dir / "reproduction.csv").write_text("my own table")
    before = tree(users_dir)
    assert cli.main(["reproduce", "--out", str(users_dir)]) == 2
    err = capsys.readouterr().err
    assert "reproduction.csv" in err and "did not write" in err
    assert tree(users_dir) == before


def test_a_staged_write_keeps_every_other_file_and_replaces_its_own(users_dir):
    target = outputs.OutputDir(users_dir)
    with target.staged() as scratch:
        (scratch / "chart.png").write_bytes(b"png 1")
    assert (users_dir / "chart.png").read_bytes() == b"png 1"
    with outputs.OutputDir(users_dir).staged() as scratch:  # a rerun: the lab's own chart is replaced
        (scratch / "chart.png").write_bytes(b"png 2")
    assert (users_dir / "chart.png").read_bytes() == b"png 2"
    assert (users_dir / "thesis.tex").read_text() == "three years of work"
    assert not [p for p in users_dir.iterdir() if p.name.startswith(".uprobe_lab-scratch")]


def test_a_staged_write_that_meets_a_users_file_changes_nothing(users_dir):
    (users_dir / "chart.png").write_bytes(b"the user's picture")
    before = tree(users_dir)
    with pytest.raises(LabError, match="chart.png"):
        with outputs.OutputDir(users_dir).staged() as scratch:
            (scratch / "chart.png").write_bytes(b"lab")
            (scratch / "other.png").write_bytes(b"lab")
    assert tree(users_dir) == before


def test_a_symlink_in_the_output_is_never_followed_or_removed(users_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    os.symlink(outside, users_dir / "link")
    with pytest.raises(LabError, match="link"):
        outputs.OutputDir(users_dir).replace_all()
    assert (outside / "keep.txt").read_text() == "keep" and (users_dir / "link").is_symlink()


def test_predict_out_refuses_a_users_file_and_replaces_its_own(tmp_path):
    mine = tmp_path / "predicted.csv"
    mine.write_text("my numbers")
    with pytest.raises(LabError, match="already exists and the lab did not write it"):
        outputs.output_file(str(mine))
    assert mine.read_text() == "my numbers"
    ours = tmp_path / "ours.csv"
    assert outputs.output_file(str(ours)) == ours
    ours.write_text("bench,predicted_mops\n")
    outputs.record_file(ours)
    assert outputs.output_file(str(ours)) == ours  # the lab's own file from the last run may be replaced
    ours.write_text("edited by hand")
    with pytest.raises(LabError, match="did not write it"):
        outputs.output_file(str(ours))


def test_a_recording_never_lands_on_a_users_file_and_is_refused_before_the_boots(tmp_path, monkeypatch, capsys):
    from uprobe_lab.verify import x86_kernels

    mine = tmp_path / "kernels.json"
    mine.write_text('{"my": "notes"}')
    monkeypatch.setattr(x86_kernels, "referee", lambda *a, **k: pytest.fail("booted before checking --record"))
    assert cli.main(["verify", "--kernels", "6.18", "--record", str(mine)]) == 2  # the command line's error: not 1,
    err = capsys.readouterr().err                                                # which says no kernel could be had
    assert err.startswith("error: --record") and "did not write it" in err and mine.read_text() == '{"my": "notes"}'
    with pytest.raises(LabError, match="did not write it"):
        outputs.write_output(mine, "{}")
    assert mine.read_text() == '{"my": "notes"}'


def test_the_labs_shipped_recordings_may_be_recorded_again():
    shipped = REPO / "uprobe_lab" / "data" / "native_scaling_6.18.json"
    assert outputs.output_file(str(shipped), recording=shipped.name) == shipped  # checked only: nothing is written
    host = REPO / "uprobe_lab" / "data" / "host_prices_another_host.json"  # the price benches name theirs per host
    assert outputs.output_file(str(host), recording="host_prices_*.json") == host


@pytest.mark.parametrize("name, recording", [("published.csv", ""), ("published.csv", "native_scaling_6.18.json"),
                                             ("tick.c", "own_program_6.18.json"), ("README.md", "host_prices_*.json"),
                                             ("native_scaling_6.18.json", ""),
                                             ("own_program_6.18.json", "x86_kernels_referee.json"),
                                             ("host_prices_6.18.json", "native_example_6.18.json"),
                                             ("host_prices_new.json", "arm64_referee_6.1.json")])
def test_no_other_file_in_the_packages_data_is_overwritten(name, recording):
    shipped = REPO / "uprobe_lab" / "data" / name
    with pytest.raises(LabError, match="package's source.*nothing was changed"):
        outputs.output_file(str(shipped), recording=recording)


def test_a_record_command_never_replaces_another_commands_recording(monkeypatch, capsys):
    from uprobe_lab.verify import x86_kernels

    monkeypatch.setattr(x86_kernels, "referee", lambda *a, **k: pytest.fail("booted before checking --record"))
    shipped = REPO / "uprobe_lab" / "data" / "own_program_6.18.json"  # chapter 08's, made by record_own_program
    before = shipped.read_bytes()
    assert cli.main(["verify", "--kernels", "6.18", "--record", str(shipped)]) == 2
    err = capsys.readouterr().err
    assert "package's source" in err and "records only" in err and "x86_kernels_referee.json" in err
    assert shipped.read_bytes() == before
    with pytest.raises(ValueError, match="not in outputs.RECORDINGS"):  # a caller names its own recording
        outputs.output_file(str(shipped), recording=True)


def test_predict_out_never_overwrites_the_labs_data(tmp_path, capsys):
    published = REPO / "uprobe_lab" / "data" / "published.csv"
    before = published.read_bytes()
    assert cli.main(["predict", "--measured", str(tmp_path / "m.csv"), "--to", "7.3", "--out", str(published)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and "package's source" in err
    assert published.read_bytes() == before


def test_a_link_into_the_packages_data_is_refused_not_replaced(tmp_path):
    for target in ("published.csv", "native_scaling_6.18.json"):
        link = tmp_path / f"link-{target}"
        os.symlink(REPO / "uprobe_lab" / "data" / target, link)
        for recording in ("", "native_scaling_6.18.json"):
            with pytest.raises(LabError, match="already exists and the lab did not write it"):
                outputs.output_file(str(link), recording=recording)
        assert link.is_symlink()


def test_a_link_in_the_packages_data_is_refused_even_with_a_recordings_name(tmp_path, monkeypatch):
    data = tmp_path / "uprobe_lab" / "data"  # a package of its own: nothing is planted in the real one
    monkeypatch.setattr(outputs, "PACKAGE", data.parent)
    monkeypatch.setattr(outputs, "DATA", data)
    data.mkdir(parents=True)
    (tmp_path / "notes.json").write_text("the user's")
    os.symlink(tmp_path / "notes.json", data / "own_program_6.18.json")
    with pytest.raises(LabError, match="package's source"):
        outputs.write_output(data / "own_program_6.18.json", "{}", recording="own_program_6.18.json")
    assert (tmp_path / "notes.json").read_text() == "the user's" and (data / "own_program_6.18.json").is_symlink()


@pytest.mark.parametrize("inside", ["uprobe_lab", "uprobe_lab/views", "uprobe_lab/data/charts"])
def test_reproduce_refuses_an_output_directory_inside_the_package(inside, capsys):
    before = sorted(p.name for p in (REPO / "uprobe_lab").rglob("*"))
    assert cli.main(["reproduce", "--out", str(REPO / inside)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and "inside the uprobe_lab package's source" in err
    assert sorted(p.name for p in (REPO / "uprobe_lab").rglob("*")) == before


def test_recording_a_shipped_file_leaves_no_manifest_in_the_package(tmp_path, monkeypatch):
    data = tmp_path / "uprobe_lab" / "data"  # a checkout of its own, so the real recordings are not touched
    monkeypatch.setattr(outputs, "PACKAGE", data.parent)
    monkeypatch.setattr(outputs, "DATA", data)
    data.mkdir(parents=True)
    (data / "native_scaling_6.18.json").write_text("old")
    outputs.write_output(data / "native_scaling_6.18.json", "new", recording="native_scaling_6.18.json")
    assert (data / "native_scaling_6.18.json").read_text() == "new"
    assert [p.name for p in data.iterdir()] == ["native_scaling_6.18.json"]


def test_every_json_file_in_the_packages_data_is_a_recording_a_command_makes_again():
    import fnmatch

    names = [p.name for p in (REPO / "uprobe_lab" / "data").glob("*.json")]
    assert names and all(any(fnmatch.fnmatchcase(n, pat) for pat in outputs.RECORDINGS) for n in names)


def test_every_recording_has_a_row_in_the_datas_readme_saying_what_makes_it():
    import fnmatch

    rows = [line.split(" | ") for line in (REPO / "uprobe_lab" / "data" / "README.md").read_text().splitlines()
            if line.startswith("| `")]
    made_by = {row[0].removeprefix("| `").removesuffix("`"): row[-1] for row in rows}
    for pattern in outputs.RECORDINGS:
        names = [name for name in made_by if fnmatch.fnmatchcase(name, pattern)]
        assert names, f"uprobe_lab/data/README.md has no row for {pattern}"
        assert all(made_by[name].strip(" |") for name in names), names


def test_the_example_program_is_never_built_over_a_users_file(tmp_path):
    from uprobe_lab import own_program

    (tmp_path / "tick").write_text("my own tick")
    with pytest.raises(LabError, match="did not write it"):
        own_program.build_example(tmp_path)
    assert (tmp_path / "tick").read_text() == "my own tick"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    built = own_program.build_example(fresh)
    assert own_program.build_example(fresh) == built  # its own build may be replaced


@pytest.mark.parametrize("write", ["staged", "write_output", "record_file"])
def test_a_manifest_link_is_refused_and_its_target_never_written(write, users_dir, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's notes")
    os.symlink(victim, users_dir / outputs.MANIFEST)
    with pytest.raises(LabError, match=r"\.uprobe_lab-written is a symbolic link.*Remove the link"):
        if write == "staged":
            with outputs.OutputDir(users_dir).staged() as scratch:
                (scratch / "chart.png").write_bytes(b"png")
        elif write == "write_output":
            outputs.write_output(users_dir / "run.json", "{}")
        else:
            (users_dir / "run.json").write_text("{}")
            outputs.record_file(users_dir / "run.json")
    assert victim.read_text() == "the user's notes" and (users_dir / outputs.MANIFEST).is_symlink()


def test_a_link_planted_after_the_checks_is_replaced_not_written_through(users_dir, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's notes")
    manifest = outputs.Manifest(users_dir)
    os.symlink(victim, users_dir / outputs.MANIFEST)  # between the lab's check and its write
    (users_dir / "chart.png").write_bytes(b"png")
    manifest.record(["chart.png"])
    assert victim.read_text() == "the user's notes"
    assert not (users_dir / outputs.MANIFEST).is_symlink() and outputs.Manifest(users_dir).is_ours("chart.png")
    ours = outputs.write_output(users_dir / "run.json", "{}")
    os.link(ours, tmp_path / "hard")  # a second name for the lab's file: a rewrite must not reach through it
    outputs.write_output(users_dir / "run.json", '{"new": 1}')
    assert (tmp_path / "hard").read_text() == "{}" and ours.read_text() == '{"new": 1}'
    assert not [p for p in users_dir.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("empty", ["", "  "])
def test_the_example_program_is_not_built_into_the_working_directory_for_an_empty_path(empty, tmp_path,
                                                                                         monkeypatch):
    from uprobe_lab import own_program

    monkeypatch.chdir(tmp_path)
    with pytest.raises(LabError, match=r"build_example's directory is empty; give a new directory"):
        own_program.build_example(empty)
    assert os.listdir(tmp_path) == []


def test_the_site_keeps_the_users_empty_directories(tmp_path):
    book = tmp_path / "book"
    for d in ("keep/inner", "mine", "notebooks/drafts"):
        (book / d).mkdir(parents=True)
    for _ in range(2):  # the first build over them, and a rebuild over the first
        site.stage(book, execute=False)
        assert all((book / d).is_dir() for d in ("keep/inner", "mine", "notebooks/drafts"))
        assert (book / "intro.md").is_file() and (book / "notebooks" / "diagrams").is_dir()


def test_a_file_the_user_saves_during_a_site_build_stays_theirs(tmp_path):
    import nbformat

    book = tmp_path / "book"

    def run(path):  # a chapter "executed" while the user saves a file into the book
        (book / "my_notes.txt").write_text("mine")
        return nbformat.read(path, as_version=4)

    site.stage(book, run=run)
    assert "my_notes.txt" not in (book / outputs.MANIFEST).read_text()
    with pytest.raises(LabError, match="my_notes.txt"):  # the next build refuses it instead of deleting it
        site.stage(book, execute=False)
    assert (book / "my_notes.txt").read_text() == "mine"
    (book / "my_notes.txt").unlink()
    site.stage(book, execute=False)  # every file it staged is in its manifest, so it rebuilds over them
    assert (book / "intro.md").is_file()


def test_a_directory_whose_manifest_another_user_owns_is_refused_before_any_write(users_dir, monkeypatch):
    """A manifest planted in a shared directory names files as the lab's; one this user may not replace would
    fail only after the output was written. Either way the directory is refused first, naming the manifest."""
    ours = outputs.write_output(users_dir / "run.json", "{}")  # a manifest naming run.json with its digest
    assert outputs.output_file(str(ours)) == ours
    euid = os.geteuid()
    monkeypatch.setattr(outputs.os, "geteuid", lambda: euid + 1)  # now the manifest's owner is someone else
    before = sorted(p.name for p in users_dir.iterdir())
    for write in (lambda: outputs.output_file(str(ours)), lambda: outputs.write_output(users_dir / "new.csv", "x"),
                  lambda: outputs.OutputDir(users_dir).claim("run.json")):
        with pytest.raises(LabError, match=rf"{outputs.MANIFEST} belongs to another user \(uid {euid}\)"):
            write()
    assert ours.read_text() == "{}" and sorted(p.name for p in users_dir.iterdir()) == before


@pytest.mark.parametrize("place, what", [(".", "the directory you are in"), ("/", "the root directory"),
                                         ("~", "your home directory"), ("..", "the uprobe_lab checkout"),
                                         ("../uprobe_lab/data", "inside the uprobe_lab package's source")])
def test_the_example_program_is_built_only_where_out_may_write(place, what, monkeypatch):
    """As --out is judged: from a notebook (its working directory the checkout's notebooks/) neither ``.`` nor
    the checkout, the package, home or / takes the program; nothing is written there."""
    from uprobe_lab import own_program

    monkeypatch.chdir(REPO / "notebooks")
    monkeypatch.setattr(own_program.subprocess, "run", lambda *a, **k: pytest.fail(f"compiled into {place}"))
    target = Path(place).expanduser()
    before = sorted(os.listdir(target))
    with pytest.raises(LabError) as err:
        own_program.build_example(place)
    assert str(err.value).startswith(f"build_example's directory {place}: that is") and what in str(err.value)
    assert str(err.value).endswith("give a new directory, e.g. build_example(tempfile.mkdtemp())") or \
        str(err.value).endswith("give a new directory outside it, e.g. build_example(tempfile.mkdtemp())")
    assert sorted(os.listdir(target)) == before


def test_the_example_program_and_the_demo_elf_say_what_to_give_in_python(tmp_path):
    from uprobe_lab import own_program, usdt

    (tmp_path / "tick").write_text("my own tick")
    with pytest.raises(LabError) as err:
        own_program.build_example(tmp_path)
    assert str(err.value) == (f"build_example: {tmp_path / 'tick'} already exists and the lab did not write it; "
                              "nothing was changed. Give a new directory, e.g. build_example(tempfile.mkdtemp())")
    (tmp_path / "tick").unlink()
    (tmp_path / "tick").mkdir()
    with pytest.raises(LabError, match=r"^build_example: .*/tick already exists .* Give a new directory, e\.g\. "
                                       r"build_example\(tempfile\.mkdtemp\(\)\)$"):
        own_program.build_example(tmp_path)
    with pytest.raises(LabError, match=r"^build_example's directory is None, not a path; give a new directory"):
        own_program.build_example(None)
    with pytest.raises(LabError, match=r"^write_demo_elf's path is None, not a path; give a file name, e\.g\. "
                                       r"usdt_demo$"):
        usdt.write_demo_elf(None)
    with pytest.raises(LabError, match=r"^write_demo_elf's path is empty; give a file name, e\.g\. usdt_demo$"):
        usdt.write_demo_elf("")
    assert os.listdir(tmp_path) == ["tick"] and os.listdir(tmp_path / "tick") == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_as_the_temp_file_is_made_leaves_no_temp_file(sig, tmp_path, monkeypatch):
    """A signal handled just after os.open made the temp file, before replace_file noted it as its own: the temp
    file goes all the same, so the next site build (replace_all) does not find a stranger in its directory."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's own SIGINT handler")
    real_open = outputs.os.open

    def open_then_stop(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        os.kill(os.getpid(), sig)
        return fd

    monkeypatch.setattr(outputs.os, "open", open_then_stop)
    with cli.terminate_as_ctrl_c(), pytest.raises(KeyboardInterrupt):  # the CLI turns SIGTERM into Ctrl-C
        outputs.replace_file(tmp_path / "x.txt", "x")
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_write_cut_short_leaves_no_temp_file(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM, which the commands turn into it) while the new file is written: the temp file goes."""
    real_fdopen = outputs.os.fdopen

    def interrupted(fd, *args, **kwargs):
        real_fdopen(fd).close()
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.os, "fdopen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        outputs.replace_file(tmp_path / "out.csv", "x")
    assert list(tmp_path.iterdir()) == []


def test_open_regular_reads_block(tmp_path):
    """O_NONBLOCK only for the open (a FIFO would block it): the file it returns reads blocking, as a FUSE file or one
    under a lease could otherwise answer a read with EWOULDBLOCK."""
    path = tmp_path / "rates.csv"
    path.write_text("x")
    with outputs.open_regular(path) as f:
        assert os.get_blocking(f.fileno())
        assert f.read() == b"x"
