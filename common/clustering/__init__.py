"""Clustering maths on numpy arrays (no Flower): distances, cuts and each algorithm's server-side step."""
