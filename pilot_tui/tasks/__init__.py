"""Task contract, the built-in demo tasks and the loader of a user's task file (runner side: torch)."""
