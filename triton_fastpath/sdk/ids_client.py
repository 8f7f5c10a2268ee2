"""The source of an ids-lane model's text client (pure): `<Name>IdsClient`, which tokenizes texts on
the client and sends ids to the encoder (`fastpath_client.ids_lane`). `render` adds it to the
encoder's module.
"""

from __future__ import annotations

from fastpath_client.tensors import ModelSignature
from triton_fastpath.sdk.codegen import module_name
from triton_fastpath.sdk.layout import docstring, exploded, literal

__all__ = ["render_ids_client", "verb_of_lane"]


def verb_of_lane(signature: ModelSignature) -> str:
    """`classify` for a classifier's encoder (class scores and index), `embed` for an embedding model's."""
    return "classify" if any(s.name == "label_index" for s in signature.outputs) else "embed"


def render_ids_client(
    signature: ModelSignature, name: str, encoder_client: str, result: str, lane: tuple[str, int]
) -> str:
    """The ids-lane client of an encoder model: texts tokenized here, ids sent (`fastpath_client.ids_lane`)."""
    model = signature.model_name
    max_length = lane[1]
    verb = verb_of_lane(signature)
    levels = signature.priority_levels
    priority_doc = (
        f"priority: 0 for the model's default, 1 (highest) to {levels}."
        if levels
        else "priority: 0 (the model has no priority levels)."
    )
    class_doc = (
        f"Texts in, `{result}` out: tokenized here with the model's tokenizer, sent as ids to `{model}` (no "
        f"Python process on the server's path). Options: `ModelClient`'s, and `tokenizer_file` (default: "
        f"{module_name(model)}.tokenizer.json beside this module). Needs `tokenizers`."
    )
    method_doc = f"""{verb.capitalize()} `texts` through `{model}`: sorted by length, requests padded to their longest.

Args:
    texts: str (or UTF-8 bytes) each; checked as the server checks them, truncated at {max_length} tokens.
    timeout_s: deadline of the whole call in seconds (retries included); default: the client's.
    {priority_doc}
    request_id: sent with the request ("<id>/<i>" for each of several).

Returns:
    One {result} per text, in order.

Raises:
    InvalidInput: a text is empty, not UTF-8 or too large (named, before anything is sent), or the tokenizer
        file is not the one the server's model was built with.
    Timeout, ModelUnavailable, ServerError: as `{encoder_client}`."""
    params = [
        "self",
        "texts: Sequence[str | bytes]",
        "*",
        "timeout_s: float | None = None",
        "priority: int = 0",
        'request_id: str = ""',
    ]
    return "\n".join(
        [
            f"class {name}(IdsLaneClient[{result}]):",
            docstring(class_doc, 4),
            "",
            f"    ENCODER = {encoder_client}",
            f"    TOKENIZER_FILE = Path(__file__).with_name({literal(module_name(model) + '.tokenizer.json')})",
            f"    MAX_LENGTH = {max_length}",
            "",
            exploded(f"    def {verb}(", params, 4, f") -> list[{result}]:"),
            docstring(method_doc, 8),
            "        return self._call(texts, timeout_s=timeout_s, priority=priority, request_id=request_id)",
        ]
    )
