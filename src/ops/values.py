"""What ops and the runner share about values: which are static (known on the host while tracing)
and the exception a node raises when it needs a concrete value inside a trace (a graph break).
Ops import it from here, so that they know no runner and the runner knows no op."""

import numpy as np


class NeedsHost(Exception):
    """Raised while tracing: node ``index`` of the top graph needs a concrete value."""

    def __init__(self, node):
        super().__init__(node.label)
        self.node = node


def is_static(value) -> bool:
    if value is None or isinstance(value, (np.ndarray, np.generic, int, float, bool, str)):
        return True
    if isinstance(value, list):
        return all(is_static(v) for v in value)
    return False
