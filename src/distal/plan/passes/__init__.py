"""Plan passes: rewrites of a plan that keep its results and its stats exact."""

from distal.plan.passes.routing import ROUTINGS, route, tree_parent

__all__ = ["ROUTINGS", "route", "tree_parent"]
