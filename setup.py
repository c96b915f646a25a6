"""Which packages ship, and from which folder: everything else is in pyproject.toml.

The repository keeps training/, export/ and cli/ beside embedkit/, installed as embedkit.training,
embedkit.export and embedkit.cli. pyproject.toml can map those folders (package-dir) but cannot
find the packages inside them under the mapped names, so the list is built here by walking the
folders: every folder below a root is a package (namespace discovery, the way an editable install
imports it), so a new module or subpackage ships in the wheel without a list to keep up to date.
tests/test_packaging.py compares a built wheel with the source tree.

Because those folders are mapped into embedkit, `pip install -e .` cannot put one folder on
sys.path; setuptools installs an import finder instead, and ends with an "Editable installation"
notice (`InformationOnly`, which pip prints as a BuildBackendWarning block) asking to beware of
folders named like the package. That folder is the checkout itself (usually named `embedkit`),
and its own `__init__.py` hands such an import to the installed package
(tests/test_layout.py::test_the_checkout_does_not_shadow_the_package): the notice is answered,
so this build leaves it out. Every other setuptools warning still prints.
"""

import warnings

from setuptools import find_namespace_packages, setup
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

# installed package -> folder in the repository
ROOTS = {
    "embedkit": "embedkit",
    "embedkit.training": "training",
    "embedkit.export": "export",
    "embedkit.cli": "cli",
}


def packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        subpackages = find_namespace_packages(folder, exclude=["__pycache__", "*.__pycache__"])
        found += [name] + [f"{name}.{sub}" for sub in subpackages]
    return found


# the server's search and docs pages (embedkit/serve/static): HTML, CSS and JavaScript
PACKAGE_DATA = {"embedkit": ["py.typed"], "embedkit.serve": ["static/*.html", "static/*.css", "static/*.js"]}

setup(packages=packages(), package_dir=ROOTS, package_data=PACKAGE_DATA)
