"""A small Gradio form for one evaluate module: the ``app.py`` of a metric published as a Space.

evaluate's own ``launch_gradio_widget`` targets a Gradio API that no longer exists; this one
builds the same kind of form (one table column per input feature, the result as JSON) on the
current API. Gradio is imported only here, so the library does not depend on it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hf_adapters.files.json_values import json_safe


def compute_from_table(module: Any, table: Any, json_columns: Sequence[str] = ()) -> dict[str, Any]:
    """``module.compute`` on a table (a pandas DataFrame) with one column per input feature; cells of
    ``json_columns`` hold JSON. NaN and infinities come back as null."""
    columns = {name: list(table[name]) for name in table.columns if any(str(value).strip() for value in table[name])}
    for name in json_columns:
        if name in columns:
            columns[name] = [json.loads(value) for value in columns[name]]
    return json_safe(module.compute(**columns))


def build_widget(module: Any, json_columns: Sequence[str] = ()):
    """A ``gr.Interface`` computing ``module`` on the rows typed into its table."""
    import gradio as gr

    features = module.features[0] if isinstance(module.features, list) else module.features
    return gr.Interface(
        fn=lambda table: compute_from_table(module, table, json_columns),
        inputs=gr.Dataframe(headers=list(features), column_count=(len(features), "fixed"), row_count=2,
                            datatype="str", label="Rows"),
        outputs=gr.JSON(label=module.name),
        title=f"Metric: {module.name}",
        description=module.info.description,
        flagging_mode="never",
    )
