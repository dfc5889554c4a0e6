"""A project whose version comes from git (setuptools-scm, hatch-vcs, pdm-backend): the
version its checkout has, read at submit and recorded with the source; what setup is given
for it; the key; the version file put into a working copy. No sandbox needed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tickwork.store.artifacts import DirectoryArtifacts
from tickwork.worker.files import versions
from tickwork.worker.files.environment_plans import AUTO, plan
from tickwork.worker.files.filetree import Ignore
from tickwork.worker.jobs.repair.job import prepare

from tests.environments.projects import PYPROJECT, VCS_BUILDS, git, project, vcs_project

NO_VERSION = "no git data, no version file and no PKG-INFO"


def _submitted(folder: Path, tmp_path: Path, **more: object) -> dict[str, object]:
    config = prepare(
        {"workspace": str(folder), "test_command": "true", **more},
        state_dir=tmp_path / "state",
        artifacts=DirectoryArtifacts(tmp_path / "artifacts"),
    )
    return dict(config["source"])


@pytest.mark.parametrize("plugin", sorted(VCS_BUILDS))
def test_a_tagged_checkout_is_submitted_with_its_tag_s_version(tmp_path: Path, plugin: str) -> None:
    source = _submitted(vcs_project(tmp_path / "p", plugin, tag="v1.2.3"), tmp_path)
    assert source["version"]["value"] == "1.2.3"  # type: ignore[index]
    assert "git describe: v1.2.3-0-g" in source["version"]["from"]  # type: ignore[index]


def test_a_repository_source_s_version_is_read_from_its_clone_at_the_ref(
    tmp_path: Path,
) -> None:
    folder = vcs_project(tmp_path / "p", "hatch-vcs", tag="v1.2.3", after=1)
    config = prepare(
        {"repo": str(folder), "ref": "v1.2.3", "test_command": "true"},
        state_dir=tmp_path / "state",
        artifacts=DirectoryArtifacts(tmp_path / "artifacts"),
    )
    assert config["source"]["version"]["value"] == "1.2.3"


def test_commits_after_the_tag_give_setuptools_scm_s_next_development_version(
    tmp_path: Path,
) -> None:
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="2.0.9", after=2)
    node = git(folder, "rev-parse", "--short=7", "HEAD")
    version = _submitted(folder, tmp_path)["version"]
    assert version["value"] == f"2.0.10.dev2+g{node}"  # type: ignore[index]


def test_the_commit_is_named_by_7_hex_digits_in_the_version_and_in_where_it_came_from(
    tmp_path: Path,
) -> None:
    """The version named the commit by `rev-parse --short=7`, the `git describe` it came from
    by git's own abbreviation (core.abbrev: auto, more digits in a large repository, or
    what the repository's configuration says): one commit, two names in one record."""
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="2.0.9", after=1)
    git(folder, "config", "core.abbrev", "12")
    node = git(folder, "rev-parse", "--short=7", "HEAD")
    version = _submitted(folder, tmp_path)["version"]
    assert version["value"] == f"2.0.10.dev1+g{node}"  # type: ignore[index]
    assert version["from"] == f"git describe: 2.0.9-1-g{node}"  # type: ignore[index]


def test_an_untagged_checkout_gets_the_untagged_development_version(tmp_path: Path) -> None:
    folder = vcs_project(tmp_path / "p", "hatch-vcs", after=1)
    node = git(folder, "rev-parse", "--short=7", "HEAD")
    version = _submitted(folder, tmp_path)["version"]
    assert version["value"] == f"0.1.dev2+g{node}"  # type: ignore[index]


def test_without_git_the_version_file_the_gitignore_left_out_is_read(tmp_path: Path) -> None:
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="v1.0")
    (folder / ".git").rename(tmp_path / "elsewhere")
    (folder / "scmpkg" / "_version.py").write_text(
        "__version__ = version = '3.4.5'\n__version_tuple__ = version_tuple = (3, 4, 5)\n"
    )
    source = _submitted(folder, tmp_path)
    assert source["version"] == {
        "value": "3.4.5",
        "from": "scmpkg/_version.py (left out by the .gitignore)",
    }


def test_the_version_file_the_build_writes_anew_is_not_named_as_left_out(
    tmp_path: Path,
) -> None:
    """iniconfig's sdist: its .gitignore names setuptools-scm's `_version.py`, and submit
    said to submit a copy whose .gitignore does not name it, though the environment's
    build writes it into the session's working copy."""
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="v1.0")
    (folder / ".git").rename(tmp_path / "elsewhere")
    (folder / "scmpkg" / "_version.py").write_text("__version__ = version = '3.4.5'\n")
    (folder / "notes.txt").write_text("left out\n")
    (folder / ".gitignore").write_text((folder / ".gitignore").read_text() + "notes.txt\n")
    source = _submitted(folder, tmp_path)
    assert source["gitignored"] == {"count": 1, "first": ["notes.txt"]}


def test_an_unpacked_sdist_s_version_is_its_pkg_info_s(tmp_path: Path) -> None:
    """`pip download --no-binary :all: tabulate` unpacked: no git data, no version file,
    a PKG-INFO saying `Version: 0.10.0`, which setuptools-scm reads itself. Setup was given
    `0+unknown` over it, and the session's tabulate said it was version 0+unknown."""
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="v1.0")
    (folder / ".git").rename(tmp_path / "elsewhere")
    (folder / "PKG-INFO").write_text(
        "Metadata-Version: 2.4\nName: scmpkg\nVersion: 0.10.0\nSummary: x\n\n"
        "Version: 9.9.9 in the long description is not the version\n"
    )
    source = _submitted(folder, tmp_path)
    assert source["version"] == {"value": "0.10.0", "from": "PKG-INFO (an sdist's metadata)"}
    files = {"pyproject.toml": (folder / "pyproject.toml").read_bytes()}
    made = plan(AUTO, files, uses_pytest=True, online=True, version=source["version"])
    assert ("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SCMPKG", "0.10.0") in made.variables


def test_an_untrusted_workspace_s_version_file_that_is_a_link_is_not_read(
    tmp_path: Path,
) -> None:
    """Nothing outside the configured roots is read: a version file linking out of the
    workspace (or a .git elsewhere) gives no version."""
    folder = vcs_project(tmp_path / "root" / "p", "setuptools-scm", tag="v1.0")
    (folder / ".git").rename(tmp_path / "outside-git")
    (folder / ".git").write_text(f"gitdir: {tmp_path / 'outside-git'}\n")
    secret = tmp_path / "secret.py"
    secret.write_text("version = '9.9.9'\n")
    (folder / "scmpkg" / "_version.py").symlink_to(secret)
    config = prepare(
        {"workspace": str(folder), "test_command": "true"},
        state_dir=tmp_path / "state",
        artifacts=DirectoryArtifacts(tmp_path / "artifacts"),
        trusted=False,
        workspace_roots=[tmp_path / "root"],
    )
    assert config["source"]["version"] == {
        "value": "",
        "from": "no git data, no version file and no PKG-INFO",
    }


def test_an_untrusted_workspace_laid_out_as_a_bare_repository_is_not_read_by_git(
    tmp_path: Path,
) -> None:
    """A `.git` folder that is no repository, beside a bare repository's layout at the top
    (HEAD, objects, refs): git skips the `.git` and reads the top folder as the repository,
    whose alternates (or included config) lie outside the roots; only the `.git` was checked."""
    outside = vcs_project(tmp_path / "outside", "setuptools-scm", tag="v9.9.9")
    folder = vcs_project(tmp_path / "root" / "p", "setuptools-scm")
    os.rename(folder / ".git", tmp_path / "p-git")
    git(folder, "init", "-q", "--bare", ".")
    (folder / "objects" / "info" / "alternates").write_text(f"{outside / '.git' / 'objects'}\n")
    commit = git(outside, "rev-parse", "HEAD")
    git(folder, "--git-dir=.", "update-ref", "refs/heads/main", commit)
    git(folder, "--git-dir=.", "symbolic-ref", "HEAD", "refs/heads/main")
    (folder / ".git").mkdir()
    config = prepare(
        {"workspace": str(folder), "test_command": "true"},
        state_dir=tmp_path / "state",
        artifacts=DirectoryArtifacts(tmp_path / "artifacts"),
        trusted=False,
        workspace_roots=[tmp_path / "root"],
    )
    assert config["source"]["version"] == {
        "value": "",
        "from": "no git data, no version file and no PKG-INFO",
    }


def test_a_packaging_file_the_gitignore_leaves_out_is_not_read(tmp_path: Path) -> None:
    """Setup never sees it, and the pack's limits never counted it: a sparse file of any
    size there would have been read whole at submit."""
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="v1.0")
    (folder / ".gitignore").write_text("pyproject.toml\n")
    source = _submitted(folder, tmp_path)
    assert "version" not in source
    assert "pyproject.toml" in source["gitignored"]["first"]  # type: ignore[index]


def test_a_project_without_a_vcs_version_plugin_records_no_version(tmp_path: Path) -> None:
    folder = project(tmp_path / "p")
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "first")
    git(folder, "tag", "v5.0")
    assert "version" not in _submitted(folder, tmp_path)


_CACHETOOLS = """\
[build-system]
requires = ["setuptools >= 80", "setuptools-scm >= 8.2"]
build-backend = "setuptools.build_meta"

[project]
name = "cachetools"
dynamic = ["version"]

[tool.setuptools.dynamic]
version = {attr = "cachetools.__version__"}
"""


def test_setuptools_scm_as_a_build_requirement_alone_gives_no_version_setuptools_reads(
    tmp_path: Path,
) -> None:
    """cachetools requires setuptools-scm to build but takes its version from an `attr`
    of its own: its card said a version was given to the build, and its key carried it."""
    assert versions.scm({"pyproject.toml": _CACHETOOLS.encode()}) is None
    static = _CACHETOOLS.replace('dynamic = ["version"]', 'version = "5.5.2"').split("[tool.")[0]
    assert versions.scm({"pyproject.toml": static.encode()}) is None
    made = plan(AUTO, {"pyproject.toml": _CACHETOOLS.encode()}, uses_pytest=False, online=True)
    assert made.variables == () and made.version is None
    folder = tmp_path / "cachetools"
    (folder / "src" / "cachetools").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(_CACHETOOLS)
    (folder / "src" / "cachetools" / "__init__.py").write_text('__version__ = "6.2.1"\n')
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "first")
    git(folder, "tag", "v6.2.1")
    assert "version" not in _submitted(folder, tmp_path)
    # setuptools-scm acts where asked (its table), or on a dynamic version nothing else gives
    asked = _CACHETOOLS + "\n[tool.setuptools_scm]\n"
    unsaid = _CACHETOOLS.split("[tool.")[0]
    for pyproject in (asked, unsaid):
        found = versions.scm({"pyproject.toml": pyproject.encode()})
        assert found is not None and found.plugins == ("setuptools-scm",)


def test_setup_is_given_the_recorded_version_and_the_key_follows_it() -> None:
    files = {"pyproject.toml": VCS_BUILDS["setuptools-scm"].format(name="scmpkg").encode()}
    tagged = {"value": "1.2.3", "from": "git describe: v1.2.3-0-gabcdef0"}
    made = plan(AUTO, files, uses_pytest=False, online=True, version=tagged)
    # for this distribution only: a package setup builds from source is not stamped with it
    assert dict(made.variables) == {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SCMPKG": "1.2.3"}
    assert made.version == {**tagged, "via": "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SCMPKG"}
    # the version file the build writes is kept in the environment
    assert any(versions.GENERATED in c and "scmpkg/_version.py" in c for c in made.commands)
    again = plan(AUTO, files, uses_pytest=False, online=True, version=dict(tagged))
    other = plan(AUTO, files, uses_pytest=False, online=True, version={"value": "1.2.4"})
    assert made.key("tc") == again.key("tc") != other.key("tc")


def test_an_unknown_version_falls_back_to_the_project_s_own_then_to_0_unknown() -> None:
    pyproject = VCS_BUILDS["hatch-vcs"].format(name="p")
    made = plan(AUTO, {"pyproject.toml": pyproject.encode()}, uses_pytest=False, online=False)
    assert dict(made.variables) == {"SETUPTOOLS_SCM_PRETEND_VERSION": versions.UNKNOWN}
    assert made.version and made.version["from"].startswith("not known")
    declared = pyproject.replace('source = "vcs"', 'source = "vcs"\nfallback-version = "0.9"')
    made = plan(AUTO, {"pyproject.toml": declared.encode()}, uses_pytest=False, online=False)
    assert dict(made.variables) == {"SETUPTOOLS_SCM_PRETEND_VERSION": "0.9"}


def test_pdm_backend_s_scm_source_gets_its_own_variable_and_given_commands_get_it_too() -> None:
    pyproject = b"""
[build-system]
requires = ["pdm-backend"]
build-backend = "pdm.backend"
[project]
name = "p"
dynamic = ["version"]
[tool.pdm.version]
source = "scm"
"""
    made = plan(
        ["pip install -e ."],
        {"pyproject.toml": pyproject},
        uses_pytest=False,
        online=True,
        version={"value": "2.1", "from": "git describe: 2.1-0-g1234567"},
    )
    assert dict(made.variables) == {"PDM_BUILD_SCM_VERSION": "2.1"}
    assert made.setup == ("pip install -e .",)


def test_a_project_without_a_plugin_keeps_the_key_it_had() -> None:
    """The variables enter the key only when there are some: other projects' environments
    are not built again after an upgrade (the key below is the one tickwork gave before;
    it changed once since, when the build requirements came to be installed `--upgrade`)."""
    pyproject = PYPROJECT.format(name="a", deps='"tinydep"', package="a")
    pyproject = pyproject.replace('[project.optional-dependencies]\ntest = ["pytest"]\n', "")
    made = plan(AUTO, {"pyproject.toml": pyproject.encode()}, uses_pytest=True, online=True)
    assert made.variables == () and made.version is None
    assert made.key("tc") == "e018373d3e7f158d67a6eb312f4e929eda3135baa5948e45dfc5a23f4d433c7d"


def test_the_version_file_the_build_wrote_is_put_into_a_working_copy_that_ignores_it(
    tmp_path: Path,
) -> None:
    env, copy = tmp_path / "env", tmp_path / "copy"
    kept = env / versions.GENERATED
    (kept / "pkg").mkdir(parents=True)
    (kept / "pkg" / "_version.py").write_text("version = '1.0'\n")
    (kept / "pkg" / "other.py").write_text("x = 1\n")  # not ignored: would enter the patch
    (kept / "pkg" / "linked.py").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("secret\n")
    (copy / "pkg").mkdir(parents=True)
    (copy / ".gitignore").write_text("pkg/_version.py\npkg/linked.py\n")
    assert versions.restore(env, copy) == ["pkg/_version.py"]
    assert (copy / "pkg" / "_version.py").read_text() == "version = '1.0'\n"
    assert not (copy / "pkg" / "other.py").exists() and not (copy / "pkg" / "linked.py").exists()
    # one the session has is never overwritten; a folder that is a link is not written in
    (copy / "pkg" / "_version.py").write_text("mine\n")
    assert versions.restore(env, copy) == []
    assert (copy / "pkg" / "_version.py").read_text() == "mine\n"
    (copy / "pkg" / "_version.py").unlink()
    os.rename(copy / "pkg", tmp_path / "real-pkg")
    (copy / "pkg").symlink_to(tmp_path / "real-pkg")
    assert versions.restore(env, copy) == []
    assert not (tmp_path / "real-pkg" / "_version.py").exists()


def test_an_extension_module_setup_built_in_place_is_put_into_the_working_copy(
    tmp_path: Path,
) -> None:
    """markupsafe's setup.py builds `_speedups` in place, in setup's copy of the source,
    which is thrown away: the session's tests ran without it (41 skipped, `speedups
    unavailable`), and a package whose extension is not optional could not be imported.
    The environment keeps it; each working copy gets it, never as one of its files."""
    setup_copy, env, copy = tmp_path / "setup-copy", tmp_path / "env", tmp_path / "copy"
    so = "_speedups.cpython-311-x86_64-linux-gnu.so"
    (setup_copy / "src" / "pkg").mkdir(parents=True)
    (setup_copy / "src" / "pkg" / so).write_bytes(b"\x7fELF" + bytes(range(256)) * 400)
    (setup_copy / "build" / "lib" / "pkg").mkdir(parents=True)
    (setup_copy / "build" / "lib" / "pkg" / so).write_bytes(b"\x7fELF copy")
    made = plan(
        AUTO,
        {"setup.py": b"from setuptools import setup\nsetup()\n"},
        uses_pytest=True,
        online=True,
    )
    (keep,) = [c for c in made.commands if "*.so" in c]
    env.mkdir()
    run = keep.replace("/env/", f"{env}/")
    subprocess.run(["sh", "-c", run], cwd=setup_copy, check=True)

    (copy / "src" / "pkg").mkdir(parents=True)
    assert versions.restore(env, copy) == [f"src/pkg/{so}"]
    assert (copy / "src" / "pkg" / so).read_bytes() == (
        setup_copy / "src" / "pkg" / so
    ).read_bytes()
    assert not (copy / "build").exists()
    (copy / "src" / "pkg" / so).write_bytes(b"rebuilt by the session")
    assert versions.restore(env, copy) == []  # one the session has is never overwritten
    assert (copy / "src" / "pkg" / so).read_bytes() == b"rebuilt by the session"
    assert Ignore.of(copy, built=True).skips_path(f"src/pkg/{so}")  # never a session's file


def test_a_linked_folder_of_the_environment_is_not_followed_out_of_it(tmp_path: Path) -> None:
    """Setup runs the project's own build code with /env writable: a `.tickwork` it made a
    link to a folder of the host holding `generated/` must not have the worker copy that
    folder's files into the working copy, where the session's commands read them."""
    env, copy, host = tmp_path / "env", tmp_path / "copy", tmp_path / "host"
    (host / "generated" / "pkg").mkdir(parents=True)
    (host / "generated" / "pkg" / "_version.py").write_text("TOKEN = 'host secret'\n")
    env.mkdir()
    (env / ".tickwork").symlink_to(host)
    (copy / "pkg").mkdir(parents=True)
    (copy / ".gitignore").write_text("*.py\n")
    assert versions.restore(env, copy) == []
    assert not (copy / "pkg" / "_version.py").exists()


@pytest.mark.parametrize(
    ("tag", "distance", "expected"),
    [
        ("v1.2.3", 0, "1.2.3"),
        ("release-4.0", 0, "4.0"),
        ("1.0rc1", 3, "1.0rc2.dev3+gabc1234"),
        ("1.0.post1", 2, "1.1.dev2+gabc1234"),
    ],
)
def test_tags_read_as_setuptools_scm_reads_them(tag: str, distance: int, expected: str) -> None:
    version = versions.from_tag(tag)
    assert version is not None
    assert versions.after_tag(version, distance, "gabc1234") == expected
    assert versions.from_tag("nightly") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the checkout to another user (chown)")
def test_a_checkout_another_user_owns_says_git_refused_it_not_that_it_has_no_git_data(
    tmp_path: Path,
) -> None:
    """git reads no repository another user owns ("detected dubious ownership"): the version
    read "no git data and no version file" of a tagged checkout. It now says git refused
    it for its owner, and what to do; the version file, if any, is read as before."""
    folder = vcs_project(tmp_path / "p", "setuptools-scm", tag="v1.0")
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, 65534, 65534)
    source = _submitted(folder, tmp_path)
    assert source["version"] == {
        "value": "",
        "from": f"no version file, no PKG-INFO, and git refused the git data at {folder}: "
        "another user "
        'owns it (git\'s "dubious ownership"); submit a clone of it that you own (git '
        "clone), or submit as its owner",
    }
    (folder / "scmpkg" / "_version.py").write_text("version = '1.0'\n")
    assert _submitted(folder, tmp_path)["version"]["value"] == "1.0"  # type: ignore[index]


def test_git_s_refusal_of_another_user_s_repository_is_told_from_other_failures() -> None:
    said = "fatal: detected dubious ownership in repository at '/src/app'\nTo add an ..."
    assert "git refused the git data at /src/app: another user owns it" in (
        versions.refused(said) or ""
    )
    assert versions.refused("fatal: not a git repository (or any parent)") is None


@pytest.mark.parametrize(("plugin", "given"), [("hatch-vcs", "4.0.0"), ("setuptools-scm", "")])
def test_an_unpacked_sdist_put_under_git_is_built_as_its_backend_reads_it(
    tmp_path: Path, plugin: str, given: str
) -> None:
    """python-dateutil 4.0.0's sdist unpacked, then `git init`ed and committed: hatchling
    builds it as its PKG-INFO's 4.0.0, whatever git or SETUPTOOLS_SCM_PRETEND_VERSION say,
    but setup's card said it was given 0.1.dev1+g... . setuptools-scm reads git first
    (PKG-INFO only without it), and is given what git says."""
    folder = vcs_project(tmp_path / "p", plugin)
    (folder / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: scmpkg\nVersion: 4.0.0\n\n")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "the sdist's metadata")
    node = git(folder, "rev-parse", "--short=7", "HEAD")
    source = _submitted(folder, tmp_path)
    expected = given or f"0.1.dev2+g{node}"
    assert source["version"]["value"] == expected  # type: ignore[index]
    files = {"pyproject.toml": (folder / "pyproject.toml").read_bytes()}
    made = plan(AUTO, files, uses_pytest=True, online=True, version=source["version"])
    assert made.version is not None and made.version["value"] == expected
    assert {value for _, value in made.variables} == {expected}
