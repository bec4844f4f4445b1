"""The trace view's tokens, now in `costmodel.views.trace`; kept importable under this name."""

from costmodel.views.trace import (NUM_TRACE_FEATURES, TRACE_FEATURE_NAMES,  # noqa: F401
                                   TRACE_FEATURES_VERSION, TRACE_KINDS, TRACE_VALUES, TraceError,
                                   kind_id, trace_tokens)
