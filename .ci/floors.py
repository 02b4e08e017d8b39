"""Print `name==lowest` for every dependency kolong declares with a lower bound (runtime and test extras, and the
build system, which the packaging test builds a wheel with).

Used by .ci/dependencies floors as a pip constraints file, so the suite runs against the very versions
pyproject.toml promises to work with.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

pyproject = tomllib.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml").read_text())
project = pyproject["project"]
declared = [*project["dependencies"], *project["optional-dependencies"]["test"], *pyproject["build-system"]["requires"]]
for line in declared:
    requirement = Requirement(line)
    floors = [spec.version for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    if floors:
        print(f"{requirement.name}=={floors[0]}")
