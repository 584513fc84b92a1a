"""The baseline subset: indexing, quotas and seeded selection, features, manifest, placement.

Public pieces (the bench times `index_tree` and `plan_quotas`/`select` separately):
`index_tree(root, progress) -> Index`, `plan_quotas(strategy, counts, n, names, caps)`,
`select(classes, counts, quotas, seed)`, `load_manifest(path)`.
"""

from mlbaseline.subset.index import IMAGE_EXTENSIONS, Index, index_tree
from mlbaseline.subset.manifest import MANIFEST_NAME, Manifest, load_manifest
from mlbaseline.subset.sampling import (
    balanced_quotas,
    plan_quotas,
    proportional_quotas,
    reference_sample,
    select,
)

__all__ = [
    "IMAGE_EXTENSIONS",
    "MANIFEST_NAME",
    "Index",
    "Manifest",
    "balanced_quotas",
    "index_tree",
    "load_manifest",
    "plan_quotas",
    "proportional_quotas",
    "reference_sample",
    "select",
]
