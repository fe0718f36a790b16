"""Build step: copy the repository's data folders into the package (attribution/_data/) of the wheel.

rules/, migrations/, sql/, hooks/ and the example incidents (tests/incidents) stay at the top of the repository
(operators and the product card refer to them there); a wheel or sdist install reads its copy under
attribution/_data/ through attribution.resources. An editable install reads the checkout's folders directly.
Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

#: repository folder -> folder under attribution/_data/ (attribution/resources.py reads the same names)
DATA = {"rules": "rules", "migrations": "migrations", "sql": "sql", "hooks": "hooks",
        "tests/incidents": "incidents"}
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class BuildWithData(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        here = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "attribution" / "_data"
        for src, dst in DATA.items():
            out = target / dst
            if out.exists():
                shutil.rmtree(out)
            shutil.copytree(here / src, out, ignore=_SKIP)  # keeps modes: the hooks stay executable


setup(cmdclass={"build_py": BuildWithData})
