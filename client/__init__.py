"""umbel's Flower ClientApp: the client task, its faults and the signal queries it answers."""
