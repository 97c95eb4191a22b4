"""``scan --show-refused``: every site a rule matched structurally but refused is listed with its reason and the
line causing it (adopter_codemods.matcher.Reason/Refusal; docs/ENGINE.md "Refusals"). Collecting them never changes
what is accepted."""

from __future__ import annotations

import importlib

import json
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods.api import refused_sites, rewrite_source, scan_source
from adopter_codemods.cache import ENV_DIR
from adopter_codemods.cli import main
from adopter_codemods.engine import find_all
from adopter_codemods.matcher import Refusal, RefusalCategory
from adopter_codemods.provider import build_module_structure
from adopter_codemods.rules import select_rules
from conftest import FIXTURES, fixture_cases, is_negative, rule_code

# Every negative fixture: its refusals as `line: category: reason (line of the cause)`; [] where the rule does not
# match structurally at all (another layer type, no such call...), so nothing was refused.
NEGATIVE_REFUSALS: dict[str, list[str]] = {
    'ADP001_fuse_bert_self_attention/neg_copy_that_clamps_the_scores.py': [
        "51: guard: guard attention_class_fits_drop_in: `BertSelfAttention.forward` reads `self.clamp_min_for_underflow`, "
        "which the forward the drop-in was written for does not: it may compute something the drop-in would not "
        "(line 51)",
    ],
    'ADP001_fuse_bert_self_attention/neg_local_class_does_not_fit.py': [
        "73: guard: guard attention_class_fits_drop_in: `BertSelfAttention.forward` is decorated (`@deprecate_kwarg("
        "'past_key_value', new_name='past_key_values', version='4.58')`), which the drop-in's forward is not; it would "
        "run the original forward (line 73)",
        "74: guard: guard attention_class_fits_drop_in: `ElectraSelfAttention.forward` takes (self, hidden_states, "
        "*args, **kwargs), not the drop-in's (hidden_states, attention_mask, head_mask, encoder_hidden_states, "
        "encoder_attention_mask, past_key_value, output_attentions); it would run the original forward (line 74)",
        "75: guard: guard attention_class_fits_drop_in: `RobertaSelfAttention` never sets `position_embedding_type`, "
        "which the drop-in reads; it would run the original forward (line 75)",
    ],
    'ADP001_fuse_bert_self_attention/neg_not_bound_to_self.py': [],
    'ADP001_fuse_bert_self_attention/neg_similar_names.py': [],
    'ADP001_fuse_bert_self_attention/neg_star_args.py': [],
    'ADP002_fuse_t5_attention/neg_not_bound_to_self.py': [],
    'ADP002_fuse_t5_attention/neg_similar_names.py': [],
    'ADP003_fuse_gpt2_attention/neg_not_bound_to_self.py': [],
    'ADP003_fuse_gpt2_attention/neg_similar_names.py': [],
    'ADP004_fast_softmax/neg_arguments_do_not_fit.py': [],
    'ADP004_fast_softmax/neg_compiled_and_unpacked.py': [],
    'ADP004_fast_softmax/neg_softmax_module_legacy_dim.py': [],
    'ADP004_fast_softmax/neg_import_shadowed_in_function.py': [],
    'ADP004_fast_softmax/neg_softmax_named_functions.py': [],
    'ADP005_fuse_dropout_ln/neg_broken_dataflow.py': [],
    'ADP005_fuse_dropout_ln/neg_dropout_before_an_early_return.py': [
        "15: partial-path: on a path that leaves before the last matched call (a `return`, a `continue`), this call "
        "runs and may draw random numbers or change state (a dropout): the fused call would not do it there (line 15)",
    ],
    'ADP005_fuse_dropout_ln/neg_file_local_classes_named_like_torch.py': [],
    'ADP005_fuse_dropout_ln/neg_call_between_dropout_and_norm.py': [
        "17: not-placeable: a call here may have effects (random numbers, state), and a matched call that has them (a dropout) would now run after it, at the fused call's place: the two would swap their draws (line 18)",
    ],
    'ADP005_fuse_dropout_ln/neg_call_between_on_one_path.py': [
        "17: not-placeable: a call here may have effects (random numbers, state), and a matched call that has them (a dropout) would now run after it, at the fused call's place: the two would swap their draws (line 19)",
    ],
    'ADP005_fuse_dropout_ln/neg_functional_inplace.py': [
        '14: guard: guard dropout_not_inplace: this dropout may run in place (`inplace=` is not False), overwriting its input; the fused kernel does not (line 14)',
    ],
    'ADP005_fuse_dropout_ln/neg_inplace_dropout.py': [
        '13: init-mismatch: the __init__ binding of self.dropout does not fit the rule: inplace=True, where the rule needs inplace=False (line 9)',
    ],
    'ADP005_fuse_dropout_ln/neg_input_changed_through_alias.py': [
        "17: input-may-be-mutated: this statement may change `x` in place, which a matched statement moved to "
        "the fused call's place reads (line 18)",
        "30: input-may-be-mutated: this statement may change a value that may share memory with `x` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 31)",
        "43: input-may-be-mutated: this statement may change a value that may share memory with `x` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 44)",
        "56: input-may-be-mutated: this statement may change a value that may share memory with `x` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 57)",
        "69: input-may-be-mutated: this statement may change a value that may share memory with `x` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 70)",
        "83: input-may-be-mutated: this statement may change a value that may share memory with `x` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 84)",
    ],
    'ADP005_fuse_dropout_ln/neg_input_redefined.py': [
        "13: input-redefined: `h` is assigned again here, so at the fused call's place it would hold another value (line 14)",
    ],
    'ADP005_fuse_dropout_ln/neg_intermediate_reused.py': [
        '13: intermediate-used-elsewhere: `h`, an intermediate result the fused call hides, is used here (line 15)',
    ],
    'ADP005_fuse_dropout_ln/neg_layernorm_without_dropout.py': [],
    'ADP005_fuse_dropout_ln/neg_residual_added_in_place.py': [
        "17: input-may-be-mutated: `hidden += residual` changes in place a tensor the matched steps did not make, which "
        "other code may hold: the fused call would leave it unchanged (line 18)",
    ],
    'ADP005_fuse_dropout_ln/neg_prenorm_call_before_if.py': [
        "20: not-placeable: even with the statements before the `if` copied into its arms: a call here may have effects (random numbers, state), and a matched call that has them (a dropout) would now run after it, at the fused call's place: the two would swap their draws (line 22)",
    ],
    'ADP005_fuse_dropout_ln/neg_prenorm_copy_normed_to_other_name.py': [
        '15: output-read-early: `hidden_states` is read here, before the place where the fused call would produce it (line 17)',
    ],
    'ADP005_fuse_dropout_ln/neg_prenorm_copy_read_between.py': [
        '16: output-read-early: `hidden_states` is read here, before the place where the fused call would produce it (line 19)',
    ],
    'ADP005_fuse_dropout_ln/neg_prenorm_copy_rebound_between.py': [
        '15: output-read-early: `hidden_states` is read here, before the place where the fused call would produce it (line 17)',
    ],
    'ADP005_fuse_dropout_ln/neg_residual_call_after_the_dropout.py': [
        '18: not-placeable: an argument here makes a call, and the fused call would evaluate it at another statement (line 18)',
    ],
    'ADP005_fuse_dropout_ln/neg_residual_draws_before_the_dropout_input.py': [
        '17: not-placeable: an argument here calls a layer or a function that may have effects (random numbers, state) before one that computes an earlier argument of the fused call; the fused call would run them in the other order (line 17)',
    ],
    'ADP005_fuse_dropout_ln/neg_sublayer_in_a_helper_method_a_statement_before.py': [
        "20: not-placeable: `self._ffn(tgt)`, a helper method's result, is passed as that call only in the fused call's own statement: the helper would run at another statement (line 20)",
    ],
    'ADP005_fuse_dropout_ln/neg_residual_computed_after_dropout.py': [
        '17: not-placeable: an argument here calls a layer or a function that may have effects (random numbers, state) after a matched call that has them; the fused call would run it first (line 17)',
    ],
    'ADP005_fuse_dropout_ln/neg_residual_local_of_helper.py': [
        '20: not-placeable: `r` is computed inside a helper method, so the fused call could not name it where it goes (line 21)',
    ],
    'ADP005_fuse_dropout_ln/neg_sum_reused.py': [
        '13: intermediate-used-elsewhere: `s`, an intermediate result the fused call hides, is used here (line 15)',
    ],
    'ADP006_fuse_bias_gelu/neg_intermediate_reused.py': [
        '15: intermediate-used-elsewhere: `h`, an intermediate result the fused call hides, is used here (line 17)',
        '26: intermediate-used-elsewhere: `logits`, an intermediate result the fused call hides, is used here (line 28)',
    ],
    'ADP006_fuse_bias_gelu/neg_linear_without_bias.py': [
        '17: init-mismatch: the __init__ binding of self.wi does not fit the rule: bias=False, where the rule needs bias=True (line 11)',
    ],
    'ADP006_fuse_bias_gelu/neg_other_activations.py': [],
    'ADP006_fuse_bias_gelu/neg_unplaceable_arguments.py': [
        '15: argument-position: a positional argument the rule passes through would bind another parameter of the fused call',
        '17: argument-position: a positional argument the rule passes through would bind another parameter of the fused call',
    ],
    'ADP007_fuse_conv_bn/neg_activation_between.py': [],
    'ADP007_fuse_conv_bn/neg_bn_before_conv.py': [],
    'ADP007_fuse_conv_bn/neg_nn_shadowed_by_init_parameter.py': [],
    'ADP007_fuse_conv_bn/neg_bn_in_loop.py': [
        '12: not-placeable: the matched calls run in different loop iterations or loops (line 14)',
    ],
    'ADP007_fuse_conv_bn/neg_bn_on_other_tensor.py': [],
    'ADP007_fuse_conv_bn/neg_conv_output_reused.py': [
        '12: intermediate-used-elsewhere: `y`, an intermediate result the fused call hides, is used here (line 14)',
    ],
    'ADP007_fuse_conv_bn/neg_input_mutated_inplace.py': [
        "14: input-may-be-mutated: a call here may modify `x` in place, which a matched statement moved to the fused call's place reads (line 15)",
    ],
    'ADP007_fuse_conv_bn/neg_input_redefined.py': [
        "12: input-redefined: `x` is assigned again here, so at the fused call's place it would hold another value (line 13)",
    ],
    'ADP007_fuse_conv_bn/neg_list_not_followed.py': [],
    'ADP007_fuse_conv_bn/neg_unknown_or_other_types.py': [],  # unknown/other types never match
    'ADP007_fuse_conv_bn/neg_cross_file_factories.py': [],  # factories of adp007_layers/ naming no pair
    'ADP007_fuse_conv_bn/neg_other_layer_types.py': [],
    'ADP007_fuse_conv_bn/neg_output_replaced_in_a_branch.py': [
        '15: other-value-read: on a path through this assignment, `y` holds another value where a matched call reads it (line 17)',
    ],
    'ADP007_fuse_conv_bn/neg_output_replaced_in_a_nested_branch.py': [
        '15: other-value-read: on a path through this assignment, `y` holds another value where a matched call reads it (line 18)',
    ],
    'ADP007_fuse_conv_bn/neg_test_reads_conv_output.py': [
        '12: intermediate-used-elsewhere: `y`, an intermediate result the fused call hides, is used here (line 13)',
    ],
    'ADP008_fuse_linear_bn/neg_bn_before_linear.py': [],
    'ADP008_fuse_linear_bn/neg_conv1d_bn1d.py': [],
    'ADP008_fuse_linear_bn/neg_flatten_between.py': [],
    'ADP008_fuse_linear_bn/neg_input_redefined.py': [
        "12: input-redefined: `x` is assigned again here, so at the fused call's place it would hold another value (line 13)",
    ],
    'ADP008_fuse_linear_bn/neg_linear_output_reused.py': [
        '12: intermediate-used-elsewhere: `h`, an intermediate result the fused call hides, is used here (line 13)',
    ],
    'ADP009_fuse_qkv/neg_call_changing_the_input_before_a_projection.py': [
        '19: input-may-be-mutated: a call before this projection in its statement is handed its input or a name reaching it, and may change it in place: the packed call, before the first projection, would read it as it was (line 20)',
        '53: input-may-be-mutated: a call before this projection in its statement is handed its input or a name reaching it, and may change it in place: the packed call, before the first projection, would read it as it was (line 54)',
        '70: input-may-be-mutated: a call before this projection in its statement is handed its input or a name reaching it, and may change it in place: the packed call, before the first projection, would read it as it was (line 71)',
    ],
    'ADP009_fuse_qkv/neg_helper_inputs_differ_in_another_branch.py': [
        '17: not-placeable: the helper method `_qkv_proj` holding it is called here too, where its result is not checked (a method walked on its own, a call whose arguments the match does not hold for, a subclass refusing the site, another object, a reference by name or through the class, or one the walk does not inline): the rewrite would change the helper for this caller as well (line 24)',
    ],
    'ADP009_fuse_qkv/neg_projection_identity_in_another_branch.py': [
        '21: init-mismatch: another __init__ binding of self.to_q does not fit the rule (it builds torch.nn.Identity, not torch.nn.Linear), and this rule\'s kernel cannot check at run time which one the layer is (line 16)',
    ],
    'ADP009_fuse_qkv/neg_sink_unsafe.py': [
        '17: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: this test reads `q`, which would be bound after it (line 18)',
        '27: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: this test makes a call (or assigns), which would now run before them (line 28)',
        "40: input-may-be-mutated: even with the statements before the `if` copied into its arms: a call here may modify `x` in place, which a matched statement moved to the fused call's place reads (line 41)",
        '54: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: this statement would have to move with them, and cannot be copied (a compound statement, or one that leaves the block or changes what names mean: `return`, `del`, `global`, ...) (line 55)',
        "66: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: an arm of this `if` is written on its header's line, so no copy can go atop it (line 67)",
        "77: input-may-be-mutated: even with the statements before the `if` copied into its arms: this statement may change a value that may share memory with `x` (a view, an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads (line 80)",
        '88: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: 4 statements between them and the `if` would have to move with them (at most 3 are copied into every arm) (line 93)',
        '102: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: this test reads an object they may change (in place, or by a call not known to leave what it is handed as it is), which it would now read before them (line 104)',
        '120: branch-not-duplicable: the matched statements before the `if` holding the others cannot be copied into its arms: this test reads an object they may change (in place, or by a call not known to leave what it is handed as it is), which it would now read before them (line 122)',
    ],
    # The forked classes: q/k read a phi of the two aliases, v the value before the branch. The graph matches no
    # such structure (a pattern variable binds one value on every path), so nothing is refused there.
    'ADP009_fuse_qkv/neg_different_inputs.py': [],
    'ADP009_fuse_qkv/neg_input_changed_through_alias.py': [
        "21: input-may-be-mutated: this statement may change `h` in place, which a matched statement moved to "
        "the fused call's place reads (line 22)",
        "32: input-may-be-mutated: this statement may change the projections' input in place (or a value that may share its memory: a view, an alias, a container holding it); the packed call, before the first projection, would read it as it was (line 33)",
        "43: input-may-be-mutated: this statement may change the projections' input in place (or a value that may share its memory: a view, an alias, a container holding it); the packed call, before the first projection, would read it as it was (line 45)",
        "54: input-may-be-mutated: this statement may change a value that may share memory with `h` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 55)",
        "65: input-may-be-mutated: this statement may change a value that may share memory with `h` (a view, "
        "an alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 66)",
    ],
    'ADP009_fuse_qkv/neg_inputs_from_two_helpers.py': [],
    'ADP010_fuse_attention_core/neg_scores_read_by_a_closure.py': [
        '14: intermediate-used-elsewhere: `s`, which a replaced statement binds, is read by this nested function when it runs (line 13)',
        "25: intermediate-used-elsewhere: this call reads the function's local names, which the rewrite would change (line 27)",
    ],
    'ADP001_fuse_bert_self_attention/neg_subclass_overrides_a_helper.py': [
        "16: guard: guard attention_class_fits_drop_in: `BertSelfAttention` overrides `transpose_for_scores`, which the forward it inherits may call: the drop-in's forward would not call it (line 16)",
    ],
    'ADP009_fuse_qkv/neg_moved_projections_unsafe.py': [
        '70: not-placeable: this statement does more than assign a matched call to a name, so it cannot be removed (line 71)',
        '78: not-placeable: this statement may leave the block (a return, break or continue) between the projections, which the packed call before the first one would all compute (line 79)',
        '88: not-placeable: the matched calls run in different loop iterations or loops (line 90)',
        '97: not-placeable: this statement does more than assign a matched call to a name, so it cannot be removed (line 99)',
        '110: input-may-be-mutated: a call before this projection in its statement is handed its input or a name reaching it, and may change it in place: the packed call, before the first projection, would read it as it was (line 111)',
        '118: not-placeable: this statement reaches a projected layer other than by calling it; the packed call, before the first projection, would use the layer as it was (line 119)',
        '127: guard: guard qkv_distinct_layers: one layer stands for two of the projections: packing it would compute its GEMM twice',
        '138: output-read-early: `q` is read here, before the place where the fused call would produce it (line 139)',
    ],
    'ADP009_fuse_qkv/neg_grad_mode_set_between.py': [
        '16: not-placeable: `torch.set_grad_enabled` runs between the matched calls: the fused call would run them all under one mode (line 18)',
    ],
    'ADP009_fuse_qkv/neg_layer_changed_after_its_projection.py': [
        "19: input-may-be-mutated: this statement reaches a matched layer other than by calling it, after the layer's call and before the fused call's place, where the layer would be used as it is then (line 16)",
        "34: input-may-be-mutated: this statement reaches a matched layer other than by calling it, after the layer's call and before the fused call's place, where the layer would be used as it is then (line 35)",
    ],
    'ADP009_fuse_qkv/neg_packed_conv1d.py': [],
    'ADP009_fuse_qkv/neg_view_merges_last_dim.py': [
        "21: guard: guard qkv_views_keep_last_dim: `q.view(b, -1, self.head_dim)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 24)",
        "38: guard: guard qkv_views_keep_last_dim: `q.view(x.size(0), -1)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 41)",
        "55: guard: guard qkv_views_keep_last_dim: `t.view(t.size(0), -1)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 52)",
        "69: guard: guard qkv_views_keep_last_dim: `q.view_as(flat)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 73)",
        "87: guard: guard qkv_views_keep_last_dim: `self.q(x).view(b, -1, self.num_heads, self.head_dim)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 87)",
        "103: guard: guard qkv_views_keep_last_dim: `q.view(x.size(0), -1)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 107)",
        "124: guard: guard qkv_views_keep_last_dim: `ViewedByStaticMethod.merge(q, k, v)` (its `merge` calls `.view` on it) is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 127)",
        "139: guard: guard qkv_views_keep_last_dim: `t.view(x.size(0), -1)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM's column slices (CUDA), where `.reshape` would work (line 140)",
        '151: guard: guard qkv_views_keep_last_dim: `outs["q"].view(x.size(0), -1)` is not proven to keep the last dim of a packed output: a view merging it with an earlier dim raises on the packed GEMM\'s column slices (CUDA), where `.reshape` would work (line 155)',
    ],
    'ADP010_fuse_attention_core/neg_absorbed_mask_calls_a_helper.py': [
        '30: not-placeable: `~self.expand(attn_mask)`, computed under `if exists(attn_mask):`, reads more than `attn_mask`: the fused call could not pass it as `~self.expand(attn_mask) if exists(attn_mask) else None` (line 33)',
    ],
    'ADP010_fuse_attention_core/neg_absorbed_mask_reads_another_name.py': [
        '25: not-placeable: `~(attn_mask & keep)`, computed under `if exists(attn_mask):`, reads more than `attn_mask`: the fused call could not pass it as `~(attn_mask & keep) if exists(attn_mask) else None` (line 28)',
    ],
    'ADP010_fuse_attention_core/neg_branch_scores_read_after.py': [
        '28: intermediate-used-elsewhere: `dots`, an intermediate result the fused call hides, is used here (line 37)',
    ],
    'ADP010_fuse_attention_core/neg_cache_object_reset_between.py': [
        "26: input-may-be-mutated: a call here may modify a value in place, which a matched statement moved to the "
        "fused call's place reads (line 28)",
    ],
    'ADP010_fuse_attention_core/neg_cache_parameter_changed_in_place.py': [
        "10: input-may-be-mutated: this statement may change a value that may share memory with `q` (a view, an "
        "alias, a container holding it) in place, which a matched statement moved to the fused call's place reads "
        "(line 11)",
    ],
    'ADP010_fuse_attention_core/neg_condition_reassigned.py': [
        '20: intermediate-used-elsewhere: `probs`, an intermediate result the fused call hides, is used here (line 24)',
    ],
    'ADP010_fuse_attention_core/neg_condition_attribute_stored.py': [
        '21: intermediate-used-elsewhere: `probs`, an intermediate result the fused call hides, is used here (line 24)',
    ],
    'ADP010_fuse_attention_core/neg_condition_with_call.py': [
        '22: intermediate-used-elsewhere: `probs`, an intermediate result the fused call hides, is used here (line 25)',
    ],
    'ADP010_fuse_attention_core/neg_dropout_before_continue.py': [
        "15: partial-path: on a path that leaves before the last matched call (a `return`, a `continue`), this call "
        "runs and may draw random numbers or change state (a dropout): the fused call would not do it there (line 16)",
    ],
    'ADP010_fuse_attention_core/neg_fill_value_read_again.py': [
        '19: intermediate-used-elsewhere: `dots`, an intermediate result the fused call hides, is used here (line 20)',
    ],
    'ADP010_fuse_attention_core/neg_retested_mask_from_helper.py': [
        '28: not-placeable: `mask` is assigned here, under `if exists(mask):`, and the fused call would test it again: only a subscript, an operator, a call of torch or einops or a tensor method that reshapes or converts is sure not to make it None (line 31)',
    ],
    'ADP010_fuse_attention_core/neg_einops_axis_names.py': [
        "18: guard: guard attention_einsum_equations: the einops equation `'batch heads i d, batch heads j d -> batch heads i j'` names an axis with more than one letter, which torch.einsum (the fused kernel's) does not read so (line 18)",
    ],
    'ADP010_fuse_attention_core/neg_einsum_equation_not_literal.py': [
        '18: guard: guard attention_einsum_equations: the einsum equation `self.score_equation` is not a string literal, so what it computes is not known (line 18)',
    ],
    'ADP010_fuse_attention_core/neg_einsum_fstring_with_placeholder.py': [
        '15: guard: guard attention_einsum_equations: the einsum equation `f"{self.batch_axes} i d, {self.batch_axes} j d -> {self.batch_axes} i j"` is not a string literal, so what it computes is not known (line 15)',
    ],
    'ADP010_fuse_attention_core/neg_einsum_five_dims.py': [
        '24: guard: guard attention_einsum_equations: the einsum `"B G H I D, B G H J D -> B G H I J"` names 5-dim tensors; the fused kernel runs SDPA on 3- and 4-dim attention only (line 24)',
    ],
    'ADP010_fuse_attention_core/neg_einsum_key_shared_across_heads.py': [
        '20: guard: guard attention_einsum_equations: the einsum `"b h i d, b j d -> b h i j"` is not a batched matrix product that the fused kernel runs as SDPA (only `A i d, A j d -> A i j` then `A i j, A j d -> A i d`, A the same leading dims) (line 20)',
    ],
    'ADP010_fuse_attention_core/neg_mask_flag_set_in_forward.py': [
        '23: not-placeable: the `if` around this step tests `self.causal`, which is neither `X is not None`, a call of a helper of this file that is exactly that test, nor a condition without calls (names, comparisons, `self` flags only `__init__` sets), so the step cannot become an optional argument of the fused call (line 24)',
    ],
    'ADP010_fuse_attention_core/neg_test_reads_a_global_or_closure_name.py': [
        '25: not-placeable: this statement runs between `if CAUSAL:` and the fused call, which would test it again: a call or a store there could change what the test reads (line 28)',
        '46: not-placeable: this statement runs between `if causal:` and the fused call, which would test it again: a call or a store there could change what the test reads (line 49)',
    ],
    'ADP010_fuse_attention_core/neg_line_between_changes_what_the_scores_read.py': [
        '22: branch-not-duplicable: even with the statements after the `if` copied into its arms: the matched statements before the `if` holding the others cannot be copied into its arms: 4 statements between them and the `if` would have to move with them (at most 3 are copied into every arm)',
    ],
    'ADP010_fuse_attention_core/neg_buffer_held_by_a_layer_called_between.py': [
        "36: input-may-be-mutated: a matched statement moved to the fused call's place reads `self.temp`, which `__init__` hands to a layer it builds: a call here may change it in place (line 37)",
    ],
    'ADP010_fuse_attention_core/neg_line_between_changes_the_key_through_self.py': [
        "20: input-may-be-mutated: even with the statements after and before the `if` copied into its arms: a call here may modify a value in place, which a matched statement moved to the fused call's place reads (line 22)",
    ],
    'ADP010_fuse_attention_core/neg_helper_also_called_through_the_class.py': [
        '21: not-placeable: the helper method `core` holding it is called here too, where its result is not checked (a method walked on its own, a call whose arguments the match does not hold for, a subclass refusing the site, another object, a reference by name or through the class, or one the walk does not inline): the rewrite would change the helper for this caller as well (line 18)',
    ],
    'ADP010_fuse_attention_core/neg_helper_handed_to_checkpoint_beside_a_call.py': [
        '21: not-placeable: the helper method `core` holding it is called here too, where its result is not checked (a method walked on its own, a call whose arguments the match does not hold for, a subclass refusing the site, another object, a reference by name or through the class, or one the walk does not inline): the rewrite would change the helper for this caller as well (line 18)',
    ],
    'ADP010_fuse_attention_core/neg_helper_call_passes_one_tensor_twice.py': [
        "23: input-may-be-mutated: a call here may modify `m` in place, which a matched statement moved to the fused call's place reads (line 24)",
    ],
    'ADP010_fuse_attention_core/neg_key_changed_by_a_closure.py': [
        "20: input-may-be-mutated: this function changes objects in place through a nested function or a global, and "
        "a call here may run that code: it could change what a matched statement moved to the fused call's place "
        "reads (line 22)",
    ],
    'ADP010_fuse_attention_core/neg_mask_reads_the_scores.py': [
        "13: intermediate-used-elsewhere: `mask.to(s.dtype)` reads `s`, an intermediate result the fused call hides, "
        "so the call could not compute that argument (line 14)",
    ],
    'ADP010_fuse_attention_core/neg_mask_rebound_in_between.py': [
        "14: input-redefined: `m` is assigned again here, so at the fused call's place it would hold another value (line 16)",
        "27: input-redefined: `self.mask` is assigned again here, so at the fused call's place it would hold another value (line 29)",
        "36: input-redefined: `m` is assigned again here, so at the fused call's place it would hold another value (line 38)",
        "51: input-redefined: `m` is assigned again here, so at the fused call's place it would hold another value (line 53)",
    ],
    'ADP010_fuse_attention_core/neg_exists_not_a_none_test.py': [
        '25: not-placeable: the `if` around this step tests `exists(attn_mask)`, which is neither `X is not None`, a call of a helper of this file that is exactly that test, nor a condition without calls (names, comparisons, `self` flags only `__init__` sets), so the step cannot become an optional argument of the fused call (line 27)',
    ],
    'ADP010_fuse_attention_core/neg_fill_min_of_other_tensor.py': [
        '19: guard: guard attention_fill_values: masked_fill fills with torch.finfo(ref.dtype).min; the fused kernel fills with -inf or torch.finfo(scores.dtype).min (its negated max) only',
    ],
    'ADP010_fuse_attention_core/neg_fallback_test_changed_in_place_before_its_if.py': [
        "21: input-may-be-mutated: a call here may modify `g` in place, which a matched statement moved to the fused "
        "call's place reads (line 22)",
        "41: input-may-be-mutated: this statement may change a value that may share memory with `self.causal` (a "
        "view, an alias, a container holding it) in place, which a matched statement moved to the fused call's place "
        "reads (line 42)",
    ],
    'ADP010_fuse_attention_core/neg_fill_unknown_value.py': [
        '19: guard: guard attention_fill_values: masked_fill fills with -10000.0; the fused kernel fills with -inf or torch.finfo(scores.dtype).min (its negated max) only',
    ],
    'ADP010_fuse_attention_core/neg_helper_does_more.py': [
        '23: not-placeable: the rewrite would remove this call of `self.attention_bias`, and with it what the helper does besides computing the matched calls (line 23)',
    ],
    'ADP010_fuse_attention_core/neg_mixed_matmul_spellings.py': [],
    'ADP010_fuse_attention_core/neg_output_view_merges_dims.py': [
        '16: guard: guard attention_output_views: `out.view(b, h * n, d)` may merge dims of the attention output, which SDPA returns on CUDA as a transposed view of a [batch, seq, heads, dim] buffer, where such a view raises (`.reshape` would work) (line 18)',
        '27: guard: guard attention_output_views: `(self.drop(p) @ v).view(q.size(0), -1)` may merge dims of the attention output, which SDPA returns on CUDA as a transposed view of a [batch, seq, heads, dim] buffer, where such a view raises (`.reshape` would work) (line 28)',
    ],
    'ADP010_fuse_attention_core/neg_property_scale_changed_between.py': [
        "22: not-placeable: an argument here reads a property, which runs code, and the fused call would evaluate it "
        "at another statement (line 23)",
    ],
    'ADP010_fuse_attention_core/neg_probs_returned.py': [
        '18: intermediate-used-elsewhere: `probs`, an intermediate result the fused call hides, is used here (line 22)',
    ],
    'ADP010_fuse_attention_core/neg_probs_stored.py': [
        '19: intermediate-used-elsewhere: `probs`, an intermediate result the fused call hides, is used here (line 21)',
    ],
    'ADP010_fuse_attention_core/neg_probs_times_head_mask.py': [],
    'ADP010_fuse_attention_core/neg_random_scale_moved_past_a_draw.py': [
        '14: not-placeable: an argument here calls a layer or a function that may have effects (random numbers, state), and the fused call would run it at another statement (line 14)',
    ],
    'ADP010_fuse_attention_core/neg_region_if_with_else.py': [],
    'ADP010_fuse_attention_core/neg_scale_call_with_optional_mask.py': [
        '24: not-placeable: an argument here makes a call, and the fused call would evaluate it at another statement (line 24)',
    ],
    'ADP010_fuse_attention_core/neg_scale_local_of_helper.py': [
        '22: not-placeable: `d ** -0.5` is computed inside a helper method, so the fused call could not name it where it goes (line 22)',
    ],
    'ADP010_fuse_attention_core/neg_scores_reused.py': [
        '19: intermediate-used-elsewhere: `scores`, an intermediate result the fused call hides, is used here (line 21)',
    ],
    'ADP010_fuse_attention_core/neg_sequential_dropout_without_softmax.py': [
        '19: init-mismatch: self.drop is an nn.Sequential that cannot stand for the matched layers: the rule passes one on whole only when its elements are exactly those layers, in the order $attend, $drop, from the first (line 14)',
    ],
    'ADP010_fuse_attention_core/neg_softmax_other_dim.py': [],
    'ADP010_fuse_attention_core/neg_softmax_module_other_dim.py': [
        '17: init-mismatch: the __init__ binding of self.attend does not fit the rule: dim=1, where the rule needs dim=-1 (line 12)',
    ],
    'ADP010_fuse_attention_core/neg_softmax_module_without_dim.py': [
        '17: init-mismatch: the __init__ binding of self.attend does not fit the rule: dim=None, where the rule needs dim=-1 (line 12)',
    ],
    'ADP010_fuse_attention_core/neg_softmax_upcast.py': [],
    'ADP010_fuse_attention_core/neg_unknown_bias_moved_past_a_statement.py': [
        '45: not-placeable: an argument here makes a call, and the fused call would evaluate it at another statement (line 45)',
    ],
    'ADP011_fuse_rms_norm/neg_other_computations.py': [
        "85: guard: guard rms_norm_class_is_exact: class NoCastBack is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 10)",
        "86: guard: guard rms_norm_class_is_exact: class CpmAntLayerNorm is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 24)",
        "87: guard: guard rms_norm_class_is_exact: class WithHelper is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 37)",
        "88: guard: guard rms_norm_class_is_exact: class Mixed is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 54)",
        "90: guard: guard rms_norm_class_is_exact: class CastToWeightDtype is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 68)",
    ],
    'ADP011_fuse_rms_norm/neg_rebound_by_apex.py': [
        "33: guard: guard rms_norm_class_is_exact: class T5LayerNorm is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 8)",
        "59: guard: guard rms_norm_class_is_exact: class PatchedNorm is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file) (line 39)",
    ],
    'ADP012_fuse_gated_mlp/neg_not_a_gated_mlp.py': [
        '15: intermediate-used-elsewhere: `a`, an intermediate result the fused call hides, is used here (line 16)',
    ],
    'ADP013_fuse_rotary_embedding/neg_not_rotate_half.py': [
        "31: guard: guard rotate_half_is_exact: rot is not defined once in this file as exactly Hugging Face's rotate_half or GPT-J's rotate_every_two (the variants' rotations) (line 24)",
        "35: guard: guard rotate_half_is_exact: rotate_chunk is not defined once in this file as exactly Hugging Face's rotate_half or GPT-J's rotate_every_two (the variants' rotations) (line 7)",
        '36: guard: guard rotate_half_is_exact: the rotation helper is not called on `q`, the value multiplied by cos',
        "37: guard: guard rotate_half_is_exact: swap_only is not defined once in this file as exactly Hugging Face's rotate_half or GPT-J's rotate_every_two (the variants' rotations) (line 18)",
        "50: guard: guard rotate_half_is_exact: every_two_3d is not defined once in this file as exactly Hugging Face's rotate_half or GPT-J's rotate_every_two (the variants' rotations) (line 41)",
    ],
    'ADP014_fuse_bart_attention/neg_other_forward.py': [
        "27: guard: guard attention_class_fits_drop_in: `BartAttention.forward` takes (self, hidden_states, attention_mask=None), not the drop-in's (hidden_states, key_value_states, past_key_value, attention_mask, layer_head_mask, output_attentions); it would run the original forward (line 27)",
    ],
}


def _render(case: Path) -> list[str]:
    sites = refused_sites(case.read_text(encoding="utf-8"), [rule_code(case)], path=str(case))
    return [
        f"{r.line}: {r.category.value}: {r.reason}" + (f" (line {r.cause_line})" if r.cause_line else "") for r in sites
    ]


NEGATIVES = [c for c in fixture_cases() if is_negative(c)]


def test_table_lists_every_negative_fixture() -> None:
    assert sorted(NEGATIVE_REFUSALS) == sorted(f"{c.parent.name}/{c.name}" for c in NEGATIVES)


@pytest.mark.parametrize("case", NEGATIVES, ids=[f"{c.parent.name}/{c.name}" for c in NEGATIVES])
def test_negative_fixture_refusals(case: Path) -> None:
    assert _render(case) == NEGATIVE_REFUSALS[f"{case.parent.name}/{case.name}"]


def test_fixture_table_covers_the_categories() -> None:
    """Categories the fixtures exercise; the others are tested on sources below."""
    seen = {line.split(": ")[1] for lines in NEGATIVE_REFUSALS.values() for line in lines}
    below = {"suppressed", "layer-rebound", "layer-used-elsewhere"}
    untested = {"partial-path"}  # a defensive check: no source found where planning passes and it fires
    assert seen | below | untested == {c.value for c in RefusalCategory}


CASES = fixture_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_collecting_refusals_changes_no_match(case: Path) -> None:
    """Same matches with and without collection; no refused site is also reported as a finding."""
    module = cst.parse_module(case.read_text(encoding="utf-8"))
    rules = select_rules([rule_code(case)])
    plain = find_all(build_module_structure(module), rules)
    refusals: list[Refusal] = []
    collected = find_all(build_module_structure(module), rules, refusals)
    assert [sorted(f.match.key()) for f in plain] == [sorted(f.match.key()) for f in collected]
    found = {(f.code, f.line) for f in scan_source(module.code, [rule_code(case)])}
    refused = {(r.code, r.line) for r in refused_sites(module.code, [rule_code(case)])}
    assert not found & refused


HEAD = '''import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.LayerNorm = nn.LayerNorm(d)
'''


def _refused(source: str, rule: str = "ADP005") -> list[tuple[int, str, str, object]]:
    return [(r.line, r.category.value, r.reason, r.cause_line) for r in refused_sites(source, [rule])]


def test_suppressed_site_is_listed_with_the_directive_line() -> None:
    source = HEAD + '''
    def forward(self, h, x):
        out = self.LayerNorm(
            self.dropout(h) + x  # noqa: ADP005
        )
        return out
'''
    assert not scan_source(source, ["ADP005"])
    assert _refused(source) == [(12, "suppressed", "a suppression comment silences this site", 12)]


def test_layer_bound_again_outside_init() -> None:
    source = HEAD + '''
    def forward(self, h, x):
        return self.LayerNorm(self.dropout(h) + x)

    def reset(self):
        self.dropout = nn.Dropout(0.2)
'''
    assert _refused(source) == [
        (
            12,
            "layer-rebound",
            "self.dropout is bound again other than by an assignment of its own in __init__ (in another method or "
            "class, by setattr, or in a chain `self.a = self.b = ...`), so what it is at the call is unknown",
            None,
        )
    ]


def test_one_refusal_per_site_over_several_paths() -> None:
    """An earlier `if` makes two paths through the match: each refuses it, one refusal is listed (the first)."""
    source = HEAD + '''
    def forward(self, h, x, flag):
        if flag:
            x = x * 2
        s = self.dropout(h) + x
        out = self.LayerNorm(s) * 2  # not `name = ln(s)`: no pre-LN form either
        return out + s
'''
    assert _refused(source) == [
        (14, "intermediate-used-elsewhere", "`s`, an intermediate result the fused call hides, is used here", 16)
    ]


def test_a_hidden_result_read_later_is_named_before_where_the_call_would_go() -> None:
    """transformers 5.x's eager attention: the mask is added under an `if` (absorbed into the call), and the
    probabilities are returned, which no plan cures: that is the reason given."""
    source = """import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    return attn_output.transpose(1, 2).contiguous(), attn_weights
"""
    assert _refused(source, "ADP010") == [
        (6, "intermediate-used-elsewhere", "`attn_weights`, an intermediate result the fused call hides, is used here",
         12)
    ]
    # Without that read the `if` is absorbed, in a module-level function as in a method.
    returned_once = source.replace("contiguous(), attn_weights", "contiguous()")
    assert _refused(returned_once, "ADP010") == []
    assert "mask=attention_mask, dropout_p=dropout, training=module.training)" in rewrite_source(
        returned_once, ["ADP010"]).code


def test_site_accepted_by_a_later_variant_is_not_listed() -> None:
    """ADP011's first variant (eps in `variance_epsilon`) refuses a LLaMA RMSNorm keeping eps in `eps`, which the
    second variant rewrites: the site is a finding, not a refusal."""
    source = '''import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = RMSNorm(d)

    def forward(self, x):
        return self.norm(x)
'''
    assert [(f.code, f.line) for f in scan_source(source, ["ADP011"])] == [("ADP011", 22)]
    assert _refused(source, "ADP011") == []


DROPOUT_SHARED = """import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.ln = nn.LayerNorm(d)

    def forward(self, x, y):
        x = self.ln(x + self.drop(y))
        return x + self.drop(y)
"""
# ADP005's first variant alone: it deletes the Dropout from __init__ and has no form that keeps it.
CLASS_REPLACING_ONLY = """rule PostLNOnly
code USR001
summary "post-LN as the class-replacing form only"

variant "post-LN"
init:
    torch.nn.Dropout(p=$p, inplace=False) -> $drop;
    torch.nn.LayerNorm(**$ln) -> $norm
    =>
    adopter_kernels.FusedDropoutAddLayerNorm(**$ln, dropout=$p) -> $norm
forward:
    $drop($a) -> $x;
    $x + $r -> $b;
    $norm($b) -> $c
    =>
    $norm($a, $r) -> $c
"""


def test_a_layer_the_rewrite_would_remove_leaves_the_site_to_a_later_variant(tmp_path: Path) -> None:
    """The Dropout serves another add, so the variant deleting it is dropped; ADP005's next variant keeps the
    modules and takes the site. A rule without such a variant refuses it, naming the other use."""
    rewritten = rewrite_source(DROPOUT_SHARED, ["ADP005"]).code
    assert "x = adopter_kernels.dropout_add_layer_norm_module(y, x, self.ln, self.drop)" in rewritten
    assert "self.drop = nn.Dropout(0.1)" in rewritten
    assert _refused(DROPOUT_SHARED) == []
    rule = tmp_path / "post_ln_only.adopter"
    rule.write_text(CLASS_REPLACING_ONLY, encoding="utf-8")
    refused = refused_sites(DROPOUT_SHARED, [], rule_files=[rule])
    assert [(r.line, r.category.value, r.reason, r.cause_line) for r in refused] == [
        (12, "layer-used-elsewhere", "self.drop, which the rewrite removes from __init__, is also used here", 13),
    ]


# ------------------------------------------------------------------------------------------------ command line

SUM_REUSED = FIXTURES / "ADP005_fuse_dropout_ln" / "neg_sum_reused.py"
REASON = "`s`, an intermediate result the fused call hides, is used here"


def test_cli_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", "--show-refused", "--no-cache", "--rules", "ADP005", str(SUM_REUSED)]) == 0
    out, err = capsys.readouterr()
    assert out == f"ADP005 refused at {SUM_REUSED}:13:9: {REASON} (line 15)\n"
    assert "0 findings (0 fixable) in 0 of 1 file; 1 site refused" in err


def test_cli_text_without_the_flag_lists_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", "--no-cache", "--rules", "ADP005", str(SUM_REUSED)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "refused" not in err


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    main(["scan", "--show-refused", "--no-cache", "--format", "json", "--rules", "ADP005", str(SUM_REUSED)])
    document = json.loads(capsys.readouterr().out)
    assert document["version"] == 3
    assert document["refused"] == [
        {
            "code": "ADP005",
            "rule": "FuseDropoutLN",
            "path": str(SUM_REUSED),
            "class": "Block",
            "function": "forward",
            "line": 13,
            "end_line": 14,
            "category": "intermediate-used-elsewhere",
            "reason": REASON,
            "cause_line": 15,
        }
    ]
    main(["scan", "--no-cache", "--format", "json", "--rules", "ADP005", str(SUM_REUSED)])
    assert "refused" not in json.loads(capsys.readouterr().out)


def test_cli_sarif(capsys: pytest.CaptureFixture[str]) -> None:
    main(["scan", "--show-refused", "--no-cache", "--format", "sarif", "--rules", "ADP005", str(SUM_REUSED)])
    run = json.loads(capsys.readouterr().out)["runs"][0]
    (result,) = run["results"]
    assert result["level"] == "note"
    assert result["ruleId"] == "ADP005"
    assert result["message"]["text"] == f"refused: {REASON} [FuseDropoutLN in Block.forward]"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 13
    assert result["properties"] == {"refused": True, "category": "intermediate-used-elsewhere"}
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["region"] == {"startLine": 15, "startColumn": 9}


def test_cli_refusals_bypass_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cached file (its findings stored by a plain scan) still has its refusals listed, and nothing is stored."""
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "cache"))
    main(["scan", "--rules", "ADP005", str(SUM_REUSED)])
    stored = sorted((tmp_path / "cache").rglob("*"))
    assert stored  # the plain scan stored the file's findings
    capsys.readouterr()
    main(["scan", "--show-refused", "--rules", "ADP005", str(SUM_REUSED)])
    assert capsys.readouterr().out == f"ADP005 refused at {SUM_REUSED}:13:9: {REASON} (line 15)\n"
    assert sorted((tmp_path / "cache").rglob("*")) == stored


UNPACKED_AFTER_DROPOUT = """import torch
from torch import nn


class Out(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(8, 8)
        self.dropout = nn.Dropout(0.1)
        self.LayerNorm = nn.LayerNorm(8)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        out = self.LayerNorm(hidden_states + input_tensor)
        first, second = {unpacked}
        return out, first
"""


def test_unpacking_an_intermediate_is_a_use_of_it() -> None:
    """`first, second = hidden_states` reads the dropout's output, which the fused call hides: refused (it was
    rewritten once, the unpacking then reading the tensor before the dropout); unpacking another value is not."""
    (refused,) = refused_sites(UNPACKED_AFTER_DROPOUT.format(unpacked="hidden_states"), ["ADP005"])
    assert refused.category is RefusalCategory.INTERMEDIATE_USED_ELSEWHERE and refused.cause_line == 16
    assert len(scan_source(UNPACKED_AFTER_DROPOUT.format(unpacked="input_tensor"), ["ADP005"])) == 1


RESIDUAL_HELPER = FIXTURES / "ADP005_fuse_dropout_ln" / "helper_adds_the_residual.py"


def test_a_helper_called_twice_keeps_its_calls() -> None:
    """fairseq's layers call `residual_connection` after the attention and after the MLP: removing one call with the
    dropout would leave the helper to the other caller only by luck of its body; refused, naming the helper (it was
    refused as "this statement does more than assign a matched call to a name")."""
    source = RESIDUAL_HELPER.read_text(encoding="utf-8").replace(
        "        return self.final_layer_norm(x)",
        "        x = self.final_layer_norm(x)\n        return self.residual_connection(x, residual)",
    )
    (refused,) = refused_sites(source, ["ADP005"])
    assert refused.category is RefusalCategory.NOT_PLACEABLE
    assert "`residual_connection` holding the matched call is called elsewhere too" in refused.reason


ACROSS_METHODS = """import torch
from torch import nn


class RowSelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)

    def weights(self, x):
        q = self.q_proj(x)
        k = self.k_proj(x)
        return (q @ k.transpose(-1, -2)).softmax(-1)

    def update(self, x, probs):
        v = self.v_proj(x)
        return probs @ v

    def forward(self, x):
        return self.update(x, self.weights(x))
"""


def test_projections_in_two_helpers_are_refused_naming_them() -> None:
    """ESM's axial attention makes q and k in one method and v in another: no one statement can take the packed
    call, and the reason says so (it said the plain `k = self.k_proj(x)` "does more than assign a matched call")."""
    (refused,) = refused_sites(ACROSS_METHODS, ["ADP009"])
    assert refused.category is RefusalCategory.NOT_PLACEABLE
    assert refused.reason.startswith("the matched calls are in different methods (`weights`, `update`)")


SHARED_HELPER = """import torch
from torch import nn


class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)

    def attend(self, q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1)
        return self.drop(p) @ v

    def forward(self, q, k, v):
        return self.attend(q, k, v)
{other}
"""

SUBCLASS_MERGING_ITS_DIMS = """

class C(A):
    def forward(self, q, k, v):
        out = self.attend(q, k, v)
        merged = out.view(out.size(0), -1, out.size(-1))
        return merged
"""

METHOD_MERGING_ITS_DIMS = """
    def residual(self, q, k, v):
        out = self.attend(q, k, v)
        merged = out.view(out.size(0), -1, out.size(-1))
        return merged
"""

SUBCLASS_USING_IT = """

class D(A):
    def forward(self, q, k, v):
        return self.attend(q, k, v) * 2
"""


@pytest.mark.parametrize("other, line", [(SUBCLASS_MERGING_ITS_DIMS, 20), (METHOD_MERGING_ITS_DIMS, 18)])
def test_a_fusion_in_a_helper_needs_every_caller_checked(other: str, line: int) -> None:
    """The rewrite of a helper changes it for every caller: a subclass whose forward merges dims of its result with
    a `.view` (refused there: SDPA's CUDA layout refuses that view) or another method, walked on its own, that does: the
    helper's fusion is refused, naming that call (both were rewritten)."""
    source = SHARED_HELPER.format(other=other)
    assert rewrite_source(source, ["ADP010"]).code == source
    refused = [r for r in refused_sites(source, ["ADP010"]) if "helper method `attend`" in r.reason]
    assert len(refused) == 1 and refused[0].cause_line == line


def test_a_fusion_in_a_helper_every_caller_accepts_is_rewritten() -> None:
    source = SHARED_HELPER.format(other=SUBCLASS_USING_IT)
    assert "adopter_kernels.attention_core(" in rewrite_source(source, ["ADP010"]).code


def test_the_unchecked_caller_would_fail_after_the_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the check off, the subclass's view of the helper's result raises once SDPA returns its CUDA layout (a
    transposed view of a [B, S, H, D] buffer, given here on CPU): the refusal above guards a real failure."""
    torch = pytest.importorskip("torch")
    import adopter_kernels
    from adopter_codemods import engine
    from adopter_kernels.equivalence import load_source_as_module

    monkeypatch.setattr(engine, "helper_callers_checked", lambda found, refusals=None: found)
    source = SHARED_HELPER.format(other=SUBCLASS_MERGING_ITS_DIMS)
    code = rewrite_source(source, ["ADP010"]).code
    assert "attention_core(" in code
    model = load_source_as_module(code, "unchecked_helper_caller").C()
    functional = importlib.import_module("adopter_kernels.attention_core").F
    sdpa = functional.scaled_dot_product_attention
    monkeypatch.setattr(
        functional, "scaled_dot_product_attention",
        lambda *a, **kw: sdpa(*a, **kw).transpose(1, 2).contiguous().transpose(1, 2),
    )
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    with adopter_kernels.use_backend("attention_core=reference"):
        model(q, k, v)
    with adopter_kernels.use_backend("attention_core=sdpa"), pytest.raises(RuntimeError, match="view size"):
        model(q, k, v)
