"""The training under test, behind one interface (`base.Training`) that every gate is written
against: the pilot's own loop over a task (`task/`) and a trainer captured from the user's script
(`trainer/`, imported only for such a campaign: it loads transformers)."""
