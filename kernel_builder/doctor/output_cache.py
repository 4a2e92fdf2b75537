"""`kbuild doctor`'s finding on the output cache (kernel_builder.assemble.output_cache): the
store KBUILD_OUTPUT_CACHE names, whether builds add to it, and whether it answers."""

from __future__ import annotations

from dataclasses import dataclass

from kernel_builder.errors import KbuildError


@dataclass(frozen=True)
class OutputCacheFinding:
    store: str | None  # the URL, credentials masked, and its access; None: no output cache
    answers: bool | None = None  # None: nothing to ask
    detail: str = ""  # how many entries it holds, or why it cannot be used


def output_cache_finding() -> OutputCacheFinding:
    from kernel_builder.assemble.output_cache import output_cache_for
    from kernel_builder.redaction import mask_credentials

    try:
        cache = output_cache_for()
    except KbuildError as e:
        return OutputCacheFinding(None, False, e.message)
    if cache is None:
        return OutputCacheFinding(None, None, "none (KBUILD_OUTPUT_CACHE or --output-cache URL): every job compiles")
    store = mask_credentials(cache.describe())
    try:
        count = cache.entry_count()
    except KbuildError as e:
        return OutputCacheFinding(store, False, mask_credentials(e.message))
    return OutputCacheFinding(store, True, f"{count} entr{'y' if count == 1 else 'ies'}")
