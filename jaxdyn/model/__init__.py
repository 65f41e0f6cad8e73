"""Robot models: URDF parsing, compilation to static index arrays, level passes."""

from .build import ROOT_JOINT as ROOT_JOINT
from .build import build_model as build_model
from .model import Model as Model
from .model import Topology as Topology
