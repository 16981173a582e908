"""rldag: reinforcement learning for LLMs as a declarative dataflow graph.

This module is the plugin API: what a user's operator, reward function or environment needs.
Modules that moved in the floor plan of issue 29 still import under their old names, with a
`MovedPathWarning` naming the new path (`rldag.config.moved`).
"""

from rldag.config.errors import (
    GraphError,
    InputError,
    ModelLoadError,
    RowError,
    RunError,
    SpecError,
)
from rldag.config.moved import CORE_MOVES, MovedPathWarning, install
from rldag.config.spec import NodeKind, PoolName, check_choice, check_positive
from rldag.graph.operator import NodeContext, OperatorDef, PoolReservation, Port
from rldag.graph.refill import with_shortfall
from rldag.graph.registry import (
    Registry,
    import_target,
    register,
    register_adapter,
    register_path,
)
from rldag.graph.reported import with_reported_metrics
from rldag.graph.schema import MESSAGES, Column, col, columns, type_name

__version__ = "0.1.0"

install(CORE_MOVES)  # old module paths still import, with a warning naming the new one

__all__ = [
    "MESSAGES",
    "Column",
    "GraphError",
    "InputError",
    "ModelLoadError",
    "MovedPathWarning",
    "NodeContext",
    "NodeKind",
    "OperatorDef",
    "PoolName",
    "PoolReservation",
    "Port",
    "Registry",
    "RowError",
    "RunError",
    "SpecError",
    "check_choice",
    "check_positive",
    "col",
    "columns",
    "import_target",
    "register",
    "register_adapter",
    "register_path",
    "type_name",
    "with_reported_metrics",
    "with_shortfall",
]
