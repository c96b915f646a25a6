"""This folder is embedkit's source checkout; the package is its `embedkit/` folder.

A checkout is usually named `embedkit`, so Python run from the folder above it would import the
checkout itself under that name (as a package without any of embedkit's names) before the installed
package. This file hands that import to the installed embedkit (an editable install of this very
checkout, or a wheel), or says in one line that none is installed. Nothing else imports it.
"""

import importlib.util
import os
import sys
from importlib.machinery import PathFinder


def _installed_spec():
    """The installed package's spec, looked up everywhere but in the folder that holds this checkout."""
    here = os.path.realpath(__file__)
    elsewhere = [
        entry
        for entry in sys.path
        if not os.path.isfile(os.path.join(entry or ".", __name__, "__init__.py"))
        or os.path.realpath(os.path.join(entry or ".", __name__, "__init__.py")) != here
    ]
    spec = PathFinder.find_spec(__name__, elsewhere)
    if spec is not None and spec.origin is not None:
        return spec
    for finder in sys.meta_path:  # an editable install's finder
        if finder is PathFinder or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(__name__, None)
        if spec is not None and spec.origin is not None and os.path.realpath(spec.origin) != here:
            return spec
    return None


if __name__ == "embedkit":
    _spec = _installed_spec()
    if _spec is None:
        _checkout = os.path.dirname(os.path.realpath(__file__))
        raise ImportError(
            f"{_checkout} is embedkit's source checkout and embedkit is not installed: "
            "run `make setup` inside it, then use its .venv"
        )
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _module  # the import statement returns what sys.modules holds
    _spec.loader.exec_module(_module)
