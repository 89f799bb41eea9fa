// The version of the documents the API speaks (resources, events, snapshots, the REST envelope,
// seed documents). One spelling: a second version is a change of the contract, made here.

/** The schema_version every document carries and every write accepts (or leaves empty). */
export const SCHEMA_VERSION = "v1";
