"""Machine grids and the tensor distribution notation."""

from distal.distribution.machine import Machine
from distal.distribution.notation import Distribution, parse_distribution
from distal.distribution.partition import Placement, block_interval

__all__ = ["Distribution", "Machine", "Placement", "block_interval", "parse_distribution"]
