"""engine.dp: data-parallel replicas and the controller that routes to them."""
