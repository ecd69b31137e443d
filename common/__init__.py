"""What server and clients share, free of Flower: keys, config, data, models, training, signals, clustering."""
