"""forklift as a conda package: deploy/conda/recipe.yaml is conda-forge's recipe of the core. conda-forge is out of
reach here and in CI, so nothing that needs its packages runs: the recipe is rendered with rattler-build and its run
requirements checked against pyproject's core dependencies; it is built offline with this machine's Python standing
in for the host environment's; and a build of it is installed from a file:// channel with py-rattler into a prefix
whose `forklift --help` runs."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import rattler
import yaml
from packaging.requirements import Requirement
from rattler_build import (
    FileEntry,
    PlatformConfig,
    RenderConfig,
    Stage0Recipe,
    ToolConfiguration,
    assemble_package,
)

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "deploy" / "conda" / "recipe.yaml"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# pyproject's names that conda-forge spells otherwise; the rest are the same, lower-cased
CONDA_NAMES = {
    "opencv-python-headless": "py-opencv",  # its cv2 carries opencv-python-headless's metadata: pip check passes
    "matplotlib": "matplotlib-base",  # conda-forge's matplotlib adds the Qt backend
    "prometheus-client": "prometheus_client",
}
PYPI_NAMES = {conda: pypi for pypi, conda in CONDA_NAMES.items()}
# run requirements of the recipe's own: the interpreter, and Unix only (forklift locks with fcntl)
CONDA_ONLY = {"python", "__unix"}
# the run requirements `forklift --help` imports: the offline install carries only these (the others are hundreds
# of MB: OpenVINO, ONNX Runtime, OpenCV); a new import at startup fails the install test until it is added here
HELP_NEEDS = ("pyyaml",)
SITE_PACKAGES = Path(sysconfig.get_path("purelib", "posix_prefix", {"base": "."}))  # lib/python3.X/site-packages


def _conda_name(requirement: Requirement) -> str:
    return CONDA_NAMES.get(requirement.name.lower(), requirement.name.lower())


def _spec(conda: str) -> tuple[str, set[str]]:
    """'py-opencv >=4.8,<5' -> ('py-opencv', {'>=4.8', '<5'}), the form a PEP 508 specifier set compares to."""
    name, _, versions = conda.partition(" ")
    return name, set(filter(None, versions.split(",")))


def _rendered() -> dict[str, Any]:
    """The recipe as rattler-build renders it for conda-forge's linux-64 CI (stage 1)."""
    config = RenderConfig(platform=PlatformConfig(target_platform="linux-64"))
    [variant] = Stage0Recipe.from_file(RECIPE).render(render_config=config)
    return variant.recipe.to_dict()


def test_the_recipe_is_pyprojects_core() -> None:
    """The recipe's run requirements are [project].dependencies under conda-forge's names, with the same bounds."""
    project, recipe = PROJECT["project"], _rendered()
    assert recipe["package"] == {"name": project["name"], "version": project["version"]}
    python_min = recipe["context"]["python_min"]
    assert project["requires-python"] == f">={python_min}"
    core = _as_conda(project["dependencies"])
    for line in project["dependencies"]:  # a marker must hold wherever the package installs (__unix: Linux, macOS)
        marker = Requirement(line).marker
        assert marker is None or all(marker.evaluate({"sys_platform": p}) for p in ("linux", "darwin")), line
    run = dict(map(_spec, recipe["requirements"]["run"]))
    assert {name: bounds for name, bounds in run.items() if name not in CONDA_ONLY} == core
    assert run["python"] == {f">={python_min}"} and run["__unix"] == set()
    backend = _as_conda(PROJECT["build-system"]["requires"])
    assert dict(map(_spec, recipe["requirements"]["host"])) == {"python": {f"{python_min}.*"}, "pip": set(), **backend}


def _as_conda(requirements: list[str]) -> dict[str, set[str]]:
    """PEP 508 requirements as conda-forge names and their bounds."""
    parsed = map(Requirement, requirements)
    return {_conda_name(requirement): {str(bound) for bound in requirement.specifier} for requirement in parsed}


def test_the_recipe_builds_what_conda_forge_wants() -> None:
    """noarch: python, pyproject's console script as the entry point, tests that import and run it, the license."""
    recipe = _rendered()
    build = recipe["build"]
    assert build["noarch"] == "python"
    assert build["script"] == "${{ PYTHON }} -m pip install . -vv --no-deps --no-build-isolation"
    assert build["python"]["entry_points"] == [
        f"{name} = {target}" for name, target in PROJECT["project"]["scripts"].items()
    ]
    [imports, script] = recipe["tests"]
    assert {"forklift", "forklift.cli"} <= set(imports["python"]["imports"])
    assert script["script"] == "forklift --help"
    assert recipe["about"]["license"] == PROJECT["project"]["license"]


def _licenses(recipe: dict[str, Any]) -> list[str]:
    """about.license_file, a name or a list of them."""
    names = recipe["about"].get("license_file", [])
    return [names] if isinstance(names, str) else names


def test_the_license_file_is_there() -> None:
    """conda-forge ships the license text, and rattler-build fails a build whose license_file is missing."""
    missing = [name for name in _licenses(_rendered()) if not (REPO / name).is_file()]
    assert not missing, f"the recipe's license_file {missing} is not in the repository (add the Apache-2.0 text)"


def _offline(*, noarch: bool, run: list[str] | None = None) -> dict[str, Any]:
    """The recipe with what needs conda-forge taken out: no host environment (this machine's Python runs the same
    pip install into $PREFIX, as the host's python would), no tests (they solve python from conda-forge). A linux-64
    build (noarch=False) leaves out the entry point too, which rattler-build writes only with a python in host: pip's
    console script stands in for it."""
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["source"]["path"] = str(REPO)  # the variant's recipe is written elsewhere
    build = recipe["build"]
    # --ignore-installed: never uninstall the editable forklift of the environment running this test
    offline = " --prefix $PREFIX --ignore-installed --no-index --disable-pip-version-check"
    build["script"] = build["script"].replace("${{ PYTHON }}", sys.executable) + offline
    if not noarch:
        del build["noarch"], build["python"]
    del recipe["requirements"]["host"], recipe["tests"]
    if run is not None:
        recipe["requirements"]["run"] = run
    if not all((REPO / name).is_file() for name in _licenses(recipe)):
        del recipe["about"]["license_file"]  # test_the_license_file_is_there says so
    return recipe


def _build(recipe: dict[str, Any], where: Path, package_format: str = "conda") -> Path:
    tools = ToolConfiguration(test_strategy="skip")
    [result] = Stage0Recipe.from_dict(recipe, recipe_dir=where / "recipe").run_build(
        tool_config=tools, output_dir=where / "build", channels=[], package_format=package_format
    )
    [package] = result.packages
    return Path(package)


def _json(archive: tarfile.TarFile, name: str) -> Any:
    member = archive.extractfile(name)
    assert member is not None, name
    return json.load(member)


@pytest.mark.slow  # rattler-build runs pip on the source: seconds
def test_the_noarch_package_builds_offline(tmp_path: Path) -> None:
    """The package conda-forge would build, but for its host: site-packages/forklift with its package data, the
    recipe's run requirements, and the entry point left to the installer (link.json)."""
    recipe = _offline(noarch=True)
    package = _build(recipe, tmp_path, "tar.bz2")  # tar.bz2: tarfile reads it, .conda needs zstd
    with tarfile.open(package) as archive:
        index, link = (_json(archive, f"info/{name}.json") for name in ("index", "link"))
        files = set(archive.getnames())
    assert (index["subdir"], index["noarch"]) == ("noarch", "python")
    assert index["depends"] == _rendered()["requirements"]["run"]
    assert link["noarch"] == {"type": "python", "entry_points": ["forklift = forklift.cli:main"]}
    shipped = {"forklift/cli/__init__.py", "forklift/serve/static/live.html", "forklift/pretrained/catalogue.yaml"}
    assert {f"site-packages/{name}" for name in shipped} <= files
    assert not {name for name in files if not name.startswith(("site-packages/", "info/"))}
    assert {f"info/licenses/{name}" for name in _licenses(recipe)} <= files


def _assembled(name: str, channel: Path) -> None:
    """A conda package of an installed distribution's files (as its wheel put them), under the recipe's name."""
    distribution = importlib.metadata.distribution(PYPI_NAMES.get(name, name))
    files = [
        FileEntry.from_paths(Path(str(distribution.locate_file(file))), SITE_PACKAGES / file)
        for file in distribution.files or []
        if not str(file).startswith("..") and "__pycache__" not in file.parts
    ]
    subdir = str(rattler.Subdir.current())
    assemble_package(
        name=name, version=distribution.version, target_platform=subdir, build_string="wheel_0",
        output_dir=channel / subdir, files=files, compression_level=1, summary="assembled by tests/test_conda.py",
    )  # fmt: skip


@pytest.mark.slow  # a build, an index, a solve and an install: seconds
def test_the_package_installs_from_a_channel_and_runs(tmp_path: Path) -> None:
    """A linux-64 build of the recipe, whose run requirements are those `forklift --help` needs, and those assembled
    from their installed wheels, in a file:// channel: rattler solves and installs them into a prefix, where
    forklift's console script runs on this machine's Python with nothing but the prefix on its path."""
    run = [spec for spec in _rendered()["requirements"]["run"] if _spec(spec)[0] in {"__unix", *HELP_NEEDS}]
    package = _build(_offline(noarch=False, run=run), tmp_path)
    channel = tmp_path / "channel"
    (channel / package.parent.name).mkdir(parents=True)
    package.rename(channel / package.parent.name / package.name)
    for name in HELP_NEEDS:
        _assembled(name, channel)

    prefix = tmp_path / "prefix"

    async def solve_and_install() -> list[str]:
        await rattler.index.index_fs(channel)
        records = await rattler.solve(
            [rattler.Channel(channel.as_uri())], ["forklift"], virtual_packages=rattler.VirtualPackage.detect()
        )
        await rattler.install(records, prefix, cache_dir=tmp_path / "pkgs", show_progress=False)
        return sorted(record.name.normalized for record in records)

    assert asyncio.run(solve_and_install()) == sorted(["forklift", *HELP_NEEDS])
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    environment["PYTHONPATH"] = str(prefix / SITE_PACKAGES)

    def run_in_prefix(*args: str) -> str:  # -S: no site-packages but the prefix's (the venv has forklift, editable)
        command = [sys.executable, "-S", *args]
        result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert run_in_prefix(str(prefix / "bin" / "forklift"), "--help").startswith("usage: forklift")
    where = run_in_prefix("-c", "import forklift, yaml; print(forklift.__file__); print(yaml.__file__)").split()
    assert all(Path(path).is_relative_to(prefix / SITE_PACKAGES) for path in where), where
