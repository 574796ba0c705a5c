"""The aggregation action: ``from owx.disdel.actions.aggregate import main``."""

from owx.disdel.actions import entry
from owx.disdel.messages import AggregateParams
from owx.disdel.worker import aggregate

main = entry(AggregateParams, aggregate)
