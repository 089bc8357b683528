"""The cached-decoding engine every system decodes with: per-layer KV caches, one token or many positions
stepped through the looped groups under exit rules, generation, and the layer and FLOP count of a decoded token."""
