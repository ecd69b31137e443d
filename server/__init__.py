"""umbel's Flower ServerApp, its command line, experiments, results, figures and deployment."""
