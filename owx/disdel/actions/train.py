"""The training action: ``from owx.disdel.actions.train import main``."""

from owx.disdel.actions import entry
from owx.disdel.messages import TrainParams
from owx.disdel.worker import train

main = entry(TrainParams, train)
