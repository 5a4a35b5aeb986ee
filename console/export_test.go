package console

// OverviewWaiting is the overview's waiting list's length, for the
// benchmark that times its query alone.
const OverviewWaiting = overviewWaiting
