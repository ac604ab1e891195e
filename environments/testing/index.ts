// Test doubles for writing environment tests: a byte tokenizer with a chat template and a scripted policy.
export { ByteChatTokenizer } from "./byte-tokenizer.js";
export { ScriptedModelClient, type ScriptFn, type ScriptedModelOptions } from "./scripted-model.js";
