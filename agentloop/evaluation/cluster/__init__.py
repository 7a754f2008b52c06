"""The Ray back-end of the evaluation: evaluation actors that each own a GPU (`actor`) and the pool
that spreads a campaign's stages over them like the local worker pool (`ray_pool`)."""
