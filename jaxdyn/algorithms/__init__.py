"""Dynamics and kinematics algorithms on kinematic trees (one module per algorithm)."""
