"""Teaching surfaces.

Teaching surfaces: the Lesson (one layer, several methods, explained), insights written from a
run's data, and the layer lab. A surface: may import the doors and everything below them.
"""
