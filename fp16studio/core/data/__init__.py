"""The data side: where rows come from, column roles, the user's preprocess, building a batch."""
