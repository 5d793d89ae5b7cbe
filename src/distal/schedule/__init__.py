"""The scheduling language and bounds inference."""

from distal.schedule.api import Level, Schedule, schedule
from distal.schedule.relations import Divide, Rotate, Split

__all__ = ["Divide", "Level", "Rotate", "Schedule", "Split", "schedule"]
