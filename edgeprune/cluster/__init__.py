"""Fleets and labs on Ray (the `cluster` extra): a pool of boards, each a Ray actor on the node that reaches it."""

from edgeprune.cluster.boards import Board, load_boards
from edgeprune.cluster.connect import ClusterWatch, connect_ray
from edgeprune.cluster.pool import BoardPool

__all__ = ["Board", "BoardPool", "ClusterWatch", "connect_ray", "load_boards"]
